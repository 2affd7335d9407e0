// coordinator: trains a LoRA with the transformer split over --stages stage workers.
// Without --workers it starts the stage workers itself on loopback (per job) and stops them on exit.
// Two modes: `--job JOB.yaml` runs one job and exits; `--listen HOST:PORT` serves JobService (job_service.h):
// clients submit jobs that run one at a time.
#include <absl/flags/flag.h>
#include <absl/flags/reflection.h>

#include <string>

#include "coordinator/resume.h"
#include "core/device/binary_flags.h"
#include "core/device/determinism.h"
#include "core/device/device.h"
#include "core/util/stop_signals.h"
#include "job_service/coordinator_command.h"
#include "rpc/grpc_options.h"

ABSL_FLAG(int, stages, 2, "number of pipeline stages (of each replica)");
ABSL_FLAG(int, replicas, 0,
          "data-parallel replicas of the pipeline, each of --stages workers (0: the job's `replicas:`, 1 without); "
          "--workers then lists replica 0's stages, then replica 1's, ...");
ABSL_FLAG(std::string, job, "", "job YAML file: run this one job and exit (or --listen)");
ABSL_FLAG(std::string, listen, "",
          "serve the job service on host:port (port 0: a free one) and run submitted jobs one at a time "
          "(baton submit); prints LISTENING host:port");
ABSL_FLAG(std::string, workers, "",
          "host:port of running stage workers, one per stage (default: start them locally on loopback): "
          "comma-separated, replica after replica; or one group per replica separated by ';' (a:1,b:1;c:1,d:1); "
          "or @FILE with one line per replica");
ABSL_FLAG(int64_t, steps, 0, "override the job's step count");
ABSL_FLAG(std::string, output, "out/run",
          "output folder: lora.safetensors, train_log.jsonl, checkpoints/; with --listen the root of the jobs' "
          "folders <output>/<name>-<id>/ (default there: out/jobs)");
ABSL_FLAG(baton::ResumeMode, resume, baton::ResumeMode::kOff,
          "continue from the newest valid checkpoint in --output; refuse when there is none (bare --resume or "
          "--resume=true), or start fresh when there is none (--resume=if-any)");
ABSL_FLAG(int, rpc_timeout_s, 300, "deadline of every RPC, including a whole step");
ABSL_FLAG(int, connect_timeout_s, 20, "how long to wait for a stage worker to answer at all");
ABSL_FLAG(int, step_retries, 3,
          "times a step is redone after a stage worker is lost or stalls (then the run fails, checkpoint kept); "
          "0: the first loss fails the run");
ABSL_FLAG(int, worker_restart_timeout_s, 60,
          "how long a lost stage worker gets to come back (local: restarted here; remote: answering at its address)");
ABSL_FLAG(int, stall_timeout_s, 15,
          "a stage or link that makes no progress in a step for this long counts as lost (stages beat every second)");
ABSL_FLAG(bool, host_state_copies, true,
          "with the stage-local optimizer and one replica: each stage worker keeps its adapters and optimizer state in "
          "host shared memory ($BATON_STATE_COPY_DIR, else /dev/shm), so that a worker restarted on the same host "
          "takes them back and a lost stage costs one step (without: the steps since the last read-back, state_every)");
ABSL_FLAG(std::string, stage_worker, "", "stage_worker binary for local workers (default: next to coordinator)");
ABSL_FLAG(std::string, data_root, ".",
          "with --listen: submitted jobs may read their model, model_config, dataset, init_lora and validation "
          "dataset only inside this folder (symlinks resolved; default: the working directory); others are refused "
          "by name");
ABSL_FLAG(std::string, token_file, "",
          "with --listen and TLS: file holding the bearer token every client call must carry (baton certs writes "
          "DIR/token)");
ABSL_FLAG(std::string, metrics, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one); local stage workers "
          "serve theirs on HOST:PORT+1+i (free ports when PORT is 0); empty = no metrics");

namespace {

baton::CoordinatorCommand CommandFromFlags(baton::StopFlags& flags) {
  baton::CoordinatorCommand command;
  baton::CoordinatorOptions& options = command.options;
  options.stages = absl::GetFlag(FLAGS_stages);
  options.replicas = absl::GetFlag(FLAGS_replicas);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.output_dir = absl::GetFlag(FLAGS_output);
  options.resume = absl::GetFlag(FLAGS_resume) != baton::ResumeMode::kOff;
  options.resume_if_any = absl::GetFlag(FLAGS_resume) == baton::ResumeMode::kIfAny;
  options.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  options.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  options.stage_worker_binary = absl::GetFlag(FLAGS_stage_worker);
  options.step_retries = absl::GetFlag(FLAGS_step_retries);
  options.worker_restart_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_restart_timeout_s));
  options.stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_s));
  options.host_state_copies = absl::GetFlag(FLAGS_host_state_copies);
  command.workers = absl::GetFlag(FLAGS_workers);
  command.job = absl::GetFlag(FLAGS_job);
  command.listen = absl::GetFlag(FLAGS_listen);
  command.metrics = absl::GetFlag(FLAGS_metrics);
  command.data_root = absl::GetFlag(FLAGS_data_root);
  command.token_file = absl::GetFlag(FLAGS_token_file);
  // The one-job default out/run would mix the jobs' folders with a run's files.
  const std::string output = absl::GetFlag(FLAGS_output);
  command.output_root = output == absl::GetFlagReflectionHandle(FLAGS_output).DefaultValue() ? "out/jobs" : output;
  command.stop = &flags.stop;
  command.signal = &flags.signal;
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA
  baton::PrepareGrpcPolling();         // before anything initializes gRPC
  baton::ParseBinaryFlags(
      argc, argv,
      "coordinator --stages N [--replicas R] --job JOB.yaml [--workers host:port,...|a,b;c,d|@FILE] [--steps K] "
      "[--output DIR] "
      "[--resume[=if-any]]\n"
      "  or: coordinator --stages N --listen HOST:PORT [--workers host:port,...] [--output ROOT] [--data_root DIR]\n"
      "  either with [--metrics HOST:PORT]; --workers and --listen need [--tls_dir DIR | --insecure], --listen with\n"
      "  TLS --token_file FILE (make them with baton certs)",
      {"resume"});
  // One job: the first SIGINT/SIGTERM finishes the step, checkpoints and exits 128 + signal; a second one exits at
  // once. The job service: stops the running job with a checkpoint and returns.
  const bool service = !absl::GetFlag(FLAGS_listen).empty();
  baton::StopFlags& flags =
      baton::InstallStopSignals(service ? baton::SecondSignal::kStops : baton::SecondSignal::kExits);
  return baton::RunCoordinatorCommand(CommandFromFlags(flags));
}
