// coordinator: trains a LoRA with the transformer split over --stages stage workers.
// Without --workers it starts the stage workers itself on loopback (per job) and stops them on exit.
// Two modes: `--job JOB.yaml` runs one job and exits; `--listen HOST:PORT` serves JobService (job_service.h):
// clients submit jobs that run one at a time.
#include <absl/flags/flag.h>
#include <absl/flags/parse.h>
#include <absl/flags/reflection.h>
#include <absl/flags/usage.h>
#include <absl/strings/str_split.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_service.h"
#include "coordinator/local_tls.h"
#include "coordinator/pipeline_trainer.h"
#include "coordinator/resume.h"
#include "core/device/determinism.h"
#include "core/device/device.h"
#include "core/metrics/metrics_server.h"
#include "core/util/flags.h"
#include "core/util/log.h"
#include "rpc/tls.h"

ABSL_FLAG(int, stages, 2, "number of pipeline stages");
ABSL_FLAG(std::string, job, "", "job YAML file: run this one job and exit (or --listen)");
ABSL_FLAG(std::string, listen, "",
          "serve the job service on host:port (port 0: a free one) and run submitted jobs one at a time "
          "(baton submit); prints LISTENING host:port");
ABSL_FLAG(std::string, workers, "",
          "comma-separated host:port of running stage workers, one per stage "
          "(default: start them locally on loopback)");
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

std::atomic<bool> g_shutdown{false};
// The first SIGINT/SIGTERM finishes the step, checkpoints and exits 128 + signal; a second one exits at once.
std::atomic<int> g_signal{0};
void OnSignal(int sig) {
  if (g_signal.exchange(sig) != 0) _exit(128 + sig);
  baton::RequestCoordinatorStop();
}
void OnServiceSignal(int) { g_shutdown = true; }

// The metrics server (null without --metrics); set in main before either mode runs.
std::unique_ptr<baton::MetricsServer> g_metrics;

baton::CoordinatorOptions OptionsFromFlags() {
  baton::CoordinatorOptions options;
  options.stages = absl::GetFlag(FLAGS_stages);
  std::string workers = absl::GetFlag(FLAGS_workers);
  if (!workers.empty()) options.workers = absl::StrSplit(workers, ',', absl::SkipWhitespace());
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
  if (g_metrics) {
    options.metrics_listen = absl::GetFlag(FLAGS_metrics);
    options.metrics_address = g_metrics->address();
  }
  return options;
}

int ServeJobs() {
  baton::JobServiceOptions service;
  service.listen = absl::GetFlag(FLAGS_listen);
  service.base = OptionsFromFlags();
  service.data_root = absl::GetFlag(FLAGS_data_root);
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    auto token = baton::ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!token.ok()) {
      std::fprintf(stderr, "coordinator: --token_file: %s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    service.token = *token;
  }
  // The one-job default out/run would mix the jobs' folders with a run's files.
  const std::string output = absl::GetFlag(FLAGS_output);
  service.output_root = output == absl::GetFlagReflectionHandle(FLAGS_output).DefaultValue() ? "out/jobs" : output;
  std::signal(SIGTERM, OnServiceSignal);
  std::signal(SIGINT, OnServiceSignal);
  absl::Status status = baton::RunJobService(
      service,
      [](const std::string& address) {
        std::printf("LISTENING %s\n", address.c_str());
        std::fflush(stdout);
      },
      &g_shutdown);
  if (!status.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coordinator --stages N --job JOB.yaml [--workers host:port,...] [--steps K] [--output DIR] [--resume[=if-any]]\n"
      "  or: coordinator --stages N --listen HOST:PORT [--workers host:port,...] [--output ROOT] [--data_root DIR]\n"
      "  either with [--metrics HOST:PORT]; --workers and --listen need [--tls_dir DIR | --insecure], --listen with\n"
      "  TLS --token_file FILE (make them with baton certs)");
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA
  baton::InstallVersionFlag();
  baton::InstallFlagsHelp();
  baton::NormalizeFlagArgs(argc, argv, {"resume"});
  absl::ParseCommandLine(argc, argv);
  baton::SetLogTag("coordinator");
  // First: a bad --metrics fails before any work, and Prometheus sees the process while it loads.
  // Its `metrics: coordinator H:P, stage 0 H:P, ...` line comes once the stage workers are known.
  auto metrics = baton::StartMetricsServerFromFlag(absl::GetFlag(FLAGS_metrics), "coordinator", /*print=*/false);
  if (!metrics.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  g_metrics = std::move(*metrics);
  // Transport security (coordinator/local_tls.h): the embedded default needs no flags; servers we did not start do.
  absl::Status security =
      baton::InstallCoordinatorSecurity(!absl::GetFlag(FLAGS_workers).empty() || !absl::GetFlag(FLAGS_listen).empty());
  if (!security.ok()) {
    std::fprintf(stderr, "%s\n", std::string(security.message()).c_str());
    return 2;
  }
  if (!absl::GetFlag(FLAGS_listen).empty()) {
    if (!absl::GetFlag(FLAGS_job).empty()) {
      std::fprintf(stderr, "coordinator: --job and --listen exclude each other (submit jobs with baton submit)\n");
      return 2;
    }
    return ServeJobs();
  }
  if (absl::GetFlag(FLAGS_job).empty()) {
    std::fprintf(stderr, "coordinator: --job (one job) or --listen (the job service) is required\n");
    return 2;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto job = baton::LoadJob(absl::GetFlag(FLAGS_job));
  if (!job.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  baton::CoordinatorOptions options = OptionsFromFlags();
  if (g_metrics) baton::AddMetricsHooks(baton::JobName(*job), &options.hooks);
  auto result = baton::RunCoordinator(*job, options);
  const int sig = g_signal.load();
  if (!result.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", result.status().ToString().c_str());
    return sig != 0 && absl::IsCancelled(result.status()) ? 128 + sig : 1;
  }
  const int64_t total_steps = options.steps > 0 ? options.steps : job->steps;
  if (sig != 0 && (result->steps.empty() || result->steps.back().step < total_steps)) {
    std::fprintf(stderr,
                 "coordinator: interrupted by %s after step %lld of %lld; checkpointed: continue with --resume\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM",
                 static_cast<long long>(result->steps.empty() ? result->first_step : result->steps.back().step),
                 static_cast<long long>(total_steps));
    return 128 + sig;
  }
  if (!result->steps.empty()) {
    std::printf("done: loss %.5f → %.5f over steps %lld..%lld; wrote %s/lora.safetensors and %s/train_log.jsonl\n",
                result->steps.front().loss, result->steps.back().loss,
                static_cast<long long>(result->steps.front().step), static_cast<long long>(result->steps.back().step),
                options.output_dir.c_str(), options.output_dir.c_str());
  }
  return 0;
}
