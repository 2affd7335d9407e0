#include "coordinator/pipeline_trainer.h"

#include <absl/strings/str_cat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "coordinator/checkpoint.h"
#include "coordinator/checkpointer.h"
#include "coordinator/encoder_client.h"
#include "coordinator/job_plan.h"
#include "coordinator/optimizer_step.h"
#include "coordinator/peer_exchange.h"
#include "coordinator/replica_set.h"
#include "coordinator/resume.h"
#include "coordinator/run_report.h"
#include "coordinator/step_feed.h"
#include "coordinator/step_inputs.h"
#include "core/device/threads.h"
#include "core/lora/lora.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/train/init_lora.h"
#include "core/train/optimizer.h"
#include "core/util/clock.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "stage_driver/configure_request.h"
#include "stage_driver/stage_client.h"
#include "stage_driver/stage_denoiser.h"
#include "stage_driver/stage_pipeline.h"

namespace baton {
namespace {

// A stop asked for by whoever owns hooks.stop: main's SIGINT/SIGTERM handler, or the job service.
bool StopRequested(const CoordinatorOptions& options) {
  return options.hooks.stop != nullptr && options.hooks.stop->load();
}

using Clock = std::chrono::steady_clock;

// Trainable state at the start: the newest checkpoint when resuming (its optimizer state goes into `optimizer`),
// else the stages' own seeded init, or the job's init_lora.
struct StartState {
  std::map<std::string, at::Tensor> master;  // fp32 LoRA masters by PEFT name
  int64_t step = 0;
  bool resumed = false;
};

// The adapters' seeded init comes from replica 0's stages (every replica's are the same: seeded by the job).
absl::StatusOr<StartState> LoadStartState(const JobConfig& job, const CoordinatorOptions& options,
                                          StagePipeline& pipeline, const JobFingerprint& fingerprint,
                                          Optimizer& optimizer) {
  StartState start;
  std::optional<TrainingState> resumed;
  if (options.resume) {  // coordinator/resume.h: refuses what it cannot continue
    ASSIGN_OR_RETURN(resumed, LoadResumeCheckpoint(options.output_dir, options.resume_if_any, options.quiet));
    if (resumed) RETURN_IF_ERROR(CheckResumeMatchesJob(*resumed, options.output_dir, fingerprint, JobHash(job)));
  }
  ASSIGN_OR_RETURN(start.master, pipeline.Adapters());
  if (resumed) {
    RETURN_IF_ERROR(CheckCheckpointTensors(*resumed, start.master, job.optimizer));
    start.master = resumed->lora;
    RETURN_IF_ERROR(optimizer.LoadStateDict(resumed->optimizer));
    start.step = resumed->step;
    start.resumed = true;
    if (!options.quiet) std::printf("resuming from step %lld\n", static_cast<long long>(start.step));
  } else if (!job.init_lora.empty()) {
    ASSIGN_OR_RETURN(start.master, LoadInitLora(job.init_lora, job.lora, start.master));
  }
  for (int stage = 0; stage < pipeline.size(); ++stage) {
    for (const auto& name : pipeline.params(stage)) {
      if (!start.master.count(name)) return absl::FailedPreconditionError(absl::StrCat("no master weight for ", name));
    }
  }
  if (start.master.empty()) return absl::InvalidArgumentError("no Linear matched the LoRA targets");
  return start;
}

// One step run and applied: the coordinator's optimizer step, or the stages' own with a stage-local optimizer
// (`exchange`), where a replica lost after its micro-batches counted starts the step over on the others.
absl::StatusOr<PipelineStepRecord> RunAndApply(const JobConfig& job, const CoordinatorHooks& hooks, int64_t step,
                                               const StepInputs& inputs, ReplicaSet& replicas, PeerExchange* exchange,
                                               Optimizer& optimizer, std::map<std::string, at::Tensor>& master,
                                               StepOutputs& outputs, Clock::time_point& t_run) {
  for (int attempt = 0;; ++attempt) {
    // A stage-local optimizer's peer groups formed over the step's replicas first: the stages reduce as they go.
    const bool early = exchange != nullptr && exchange->BeforeStep(step, replicas.StepReplicas(step));
    ASSIGN_OR_RETURN(outputs, replicas.Run(step, inputs, master, exchange, early));
    t_run = Clock::now();
    if (hooks.before_update) hooks.before_update(step);
    if (exchange == nullptr) return ApplyGradients(job, step, outputs, optimizer, master);
    absl::StatusOr<PipelineStepRecord> rec = ApplyExchange(job, step, outputs, *exchange);
    if (rec.ok() || !absl::IsAborted(rec.status()) || attempt >= replicas.size()) return rec;
    LogWarning(rec.status().message(), "; the step starts over");
    RETURN_IF_ERROR(replicas.RestartStep(step));
  }
}

// The stages lost the run's state after the coordinator last read it back (a stage-local optimizer's worker restarted):
// every stage loaded with the coordinator's copy; the step the run goes on from (the steps from there to `step` are
// redone, and compute what they computed before, bit for bit).
// `until`: the last step (1-based) to redo.
absl::StatusOr<int64_t> RollBack(PeerExchange& exchange, int64_t start_step, int64_t until, const absl::Status& lost) {
  ASSIGN_OR_RETURN(int64_t updates, exchange.RollBack());
  const int64_t from = start_step + updates;
  LogWarning(lost.message(), "; rolled back to the state of step ", from, ", redoing step",
             from + 1 < until ? absl::StrCat("s ", from + 1, "..", until) : absl::StrCat(" ", until));
  return from;
}

// The replica the validation and sample passes run on: the first ready one (replica 0 unless it is being recovered
// or was lost for good: the passes neither wait for a recovery nor fail with the replica); when none is, replica 0
// after its recovery has ended (the passes then recover it as a one-replica run would).
int EvalReplica(ReplicaSet& replicas) {
  for (int r = 0; r < replicas.size(); ++r) {
    if (replicas.Ready(r)) return r;
  }
  replicas.SettleReplica(0);
  return 0;
}

// What follows step `step` (0-based): the checkpoint (the last step's, a stop's, every checkpoint_every), the
// coordinator's copy of a stage-local optimizer's state every state_every steps (what a lost stage costs), and the
// validation and sample passes.
absl::Status AfterStep(const JobConfig& job, const CoordinatorOptions& options, const JobSetup& setup, int64_t step,
                       bool last, bool stop, bool tty, const std::function<absl::Status(int64_t)>& read_back,
                       const std::function<absl::Status(int64_t)>& evaluate, std::map<std::string, at::Tensor>& master,
                       Optimizer& optimizer) {
  const int64_t done = step + 1;
  if (last || stop || (job.checkpoint_every > 0 && done % job.checkpoint_every == 0)) {
    if (tty && !options.quiet) std::printf("\n");
    RETURN_IF_ERROR(read_back(done));  // the stages hold the state
    RETURN_IF_ERROR(
        CheckpointRun(job, options, JobHash(job), setup.fingerprint, done, master, optimizer, *setup.model));
  }
  if (stop && !last) return absl::OkStatus();
  if (job.state_every > 0 && done % job.state_every == 0) RETURN_IF_ERROR(read_back(done));
  return evaluate(done);
}

// The steps from the start state to total_steps: each step's inputs prepared (and pushed) while the previous step
// runs, the step run by the replicas (redone after a lost stage), the optimizer step, the log and progress, and
// the checkpoints; a stop ends the run after a checkpoint. A stage-local optimizer's state lost with a stage rolls
// the run back to the coordinator's copy (RollBack).
absl::StatusOr<CoordinatorResult> TrainSteps(const JobConfig& job, const CoordinatorOptions& options, JobSetup& setup,
                                             ReplicaSet& replicas, PeerExchange* exchange, Optimizer& optimizer,
                                             StartState& start, int64_t total_steps, JsonlWriter& log,
                                             TrainingEvals& evals) {
  std::map<std::string, at::Tensor>& master = start.master;
  // Validation and samples between steps: forward-only passes through one replica's stages (EvalReplica), with the
  // current adapters and, as the job's ema.evals asks, their EMA (the passes leave a stage-local optimizer's adapters
  // as they were).
  StageDenoiser stage_denoiser(*setup.model, *setup.shell, setup.dtype, setup.micro_batches, replicas.pipeline(0),
                               master);
  const Denoiser denoiser = stage_denoiser.AsDenoiser();
  std::map<std::string, at::Tensor> ema_master;  // EmaWeights of `master`, set before each evaluation
  const Denoiser ema = job.optimizer.ema.evals_ema() ? stage_denoiser.With(ema_master) : Denoiser();
  // A stage-local optimizer's state into `master` and `optimizer`, after `done` steps; a stage lost meanwhile is
  // recovered first (the read then finds the state lost: the caller rolls back).
  // Several replicas: Pull reads the first ready one that holds the state and passes over any that fails; only when
  // none answers is a lost stage recovered here, in replica 0 once its own background recovery has ended (two
  // recoveries of one pipeline at once would race on its workers and clients).
  auto read_back = [&](int64_t done) -> absl::Status {
    if (exchange == nullptr) return absl::OkStatus();
    auto pull = [&] { return exchange->Pull(master, optimizer); };
    if (replicas.size() > 1) {
      if (pull().ok()) return absl::OkStatus();
      replicas.SettleReplica(0);
    }
    return replicas.pipeline(0).RunBetweenSteps(done, absl::StrCat("read-back (after step ", done, ")"), pull);
  };
  auto evaluate = [&](int64_t done) -> absl::Status {
    if (!evals.Due(done, total_steps, start.step)) return absl::OkStatus();
    RETURN_IF_ERROR(read_back(done));  // the passes push `master`
    stage_denoiser.set_pipeline(replicas.pipeline(EvalReplica(replicas)));
    stage_denoiser.set_step(done);
    if (ema) ema_master = EmaWeights(master, optimizer.StateDict());
    ASSIGN_OR_RETURN(EvalReport report, evals.Run(done, total_steps, start.step, denoiser, ema, log));
    if (options.hooks.on_eval) options.hooks.on_eval(report);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(evaluate(start.step));
  // Step k+1's inputs, computed and pushed off the critical path while the stages run step k: the boundary then
  // carries only the new adapters.
  StepFeed feed([&setup](int64_t step) { return PrepareStepInputs(setup, step); }, replicas, options.stall_timeout);
  const bool tty = ::isatty(STDOUT_FILENO);
  CoordinatorResult result;
  result.first_step = start.step;
  double elapsed = 0;
  int64_t logged = start.step;  // the steps 1..logged have their line in the train log
  for (int64_t step = start.step; step < total_steps; ++step) {
    auto t0 = Clock::now();
    const TrafficBytes bytes_before = replicas.Traffic();
    absl::StatusOr<StepInputs> inputs = feed.Take(step);
    if (!inputs.ok()) return inputs.status();
    const double prepare_seconds = SecondsSince(t0);
    if (step + 1 < total_steps && !StopRequested(options)) feed.Ahead(step + 1);
    StepOutputs outputs;
    Clock::time_point t_run;
    absl::StatusOr<PipelineStepRecord> applied =
        RunAndApply(job, options.hooks, step, *inputs, replicas, exchange, optimizer, master, outputs, t_run);
    // The state lost with a stage after `done` steps: the run goes back to the coordinator's copy and redoes the
    // steps up to `until` (1-based).
    auto roll_back = [&](int64_t done, int64_t until, const absl::Status& lost) -> absl::Status {
      replicas.Rewind();
      ASSIGN_OR_RETURN(const int64_t from, RollBack(*exchange, start.step, until, lost));
      result.steps_redone += done - from;  // the steps done since the copy, run again
      step = from - 1;                     // the loop's ++ takes it to the first step after the state now held
      return absl::OkStatus();
    };
    if (!applied.ok() && exchange != nullptr && exchange->StateLost()) {
      // The lost step itself was never done ("step 4: ..." names it).
      RETURN_IF_ERROR(roll_back(
          step, step + 1,
          absl::Status(applied.status().code(), absl::StrCat("step ", step + 1, ": ", applied.status().message()))));
      continue;
    }
    if (!applied.ok()) return applied.status();
    PipelineStepRecord& rec = *applied;
    rec.step_seconds = SecondsSince(t0);
    rec.prepare_seconds = prepare_seconds;
    rec.optimizer_seconds = SecondsSince(t_run);
    rec.samples_per_second = static_cast<double>(job.batch_size) / rec.step_seconds;
    const TrafficBytes bytes = replicas.Traffic() - bytes_before;
    rec.link_data_bytes = bytes.data;
    rec.link_adapter_bytes = bytes.adapters;
    rec.link_control_bytes = bytes.control;
    rec.link_heartbeat_bytes = bytes.heartbeats;
    for (size_t r = 0; r < outputs.replica_seconds.size(); ++r) {
      const double seconds = outputs.replica_seconds[r];
      const double samples = static_cast<double>(outputs.replica_micro_batches[r] * job.micro_batch_size());
      rec.replica_samples_per_second.push_back(seconds > 0 ? samples / seconds : 0.0);
    }
    if (rec.step > logged) {  // a step redone after a rollback keeps the line it had (it computed the same)
      RETURN_IF_ERROR(log.Append(StepLine(rec)));
      elapsed += rec.step_seconds;
      if (!options.quiet) PrintProgress(rec, start.step, total_steps, elapsed, tty);
      if (options.hooks.on_step) options.hooks.on_step(rec);
      result.steps.push_back(rec);
      logged = rec.step;
    }
    const bool last = step + 1 == total_steps;
    const bool stop = StopRequested(options);
    absl::Status after = AfterStep(job, options, setup, step, last, stop, tty, read_back, evaluate, master, optimizer);
    if (!after.ok() && exchange != nullptr && exchange->StateLost()) {
      RETURN_IF_ERROR(roll_back(step + 1, step + 1, after));
      continue;
    }
    RETURN_IF_ERROR(after);
    if (stop && !last) {
      LogWarning("stop requested: checkpointed step ", step + 1, " and stopping");
      break;
    }
  }
  if (tty && !options.quiet) std::printf("\n");
  return result;
}

// Sample prompts go through the job's encoder worker when it has one (the coordinator's host may not hold the text
// encoder); else the pipeline's text encoder runs here, once, cached in the output folder.
PromptEncoder PromptEncoderFor(const JobConfig& job, const CoordinatorOptions& options) {
  if (!job.encode.encoder_worker.empty()) return WorkerPromptEncoder(job.encode.encoder_worker, options.rpc_timeout);
  return LocalPromptEncoder(job, options.output_dir);
}

// The replicas of the run, set up from the job and its plan (not started).
std::unique_ptr<ReplicaSet> MakeReplicas(const JobConfig& job, const CoordinatorOptions& options, const JobSetup& setup,
                                         std::function<bool()> stop) {
  // The id the stages know the run by: the job hash, and on stage workers shared with other runs (which may be the same
  // job: the same file submitted twice) a random suffix of this run's as well.
  const std::string pipeline_id =
      options.shared_stages ? absl::StrCat(JobHash(job), "-", NewRunId().substr(0, 12)) : JobHash(job);
  ReplicaConfig config;
  config.schedule_kind = setup.schedule.kind;
  config.chunks = setup.schedule.chunks;
  config.micro_batches = setup.micro_batches;
  config.loss_scale = 1.0f / static_cast<float>(setup.micro_batches);
  config.dropout_seed = DropoutBaseSeed(job.seed);
  config.stall_timeout = options.stall_timeout;
  config.split_by_speed = job.replica_split == "speed";
  config.local_optimizer = job.replica_exchange == "allreduce";
  config.on_outage = options.hooks.on_outage;
  PipelineSpec pipeline = PipelineSpecFor(job);
  pipeline.id = pipeline_id;
  return std::make_unique<ReplicaSet>(pipeline, options, setup.plans, config, std::move(stop),
                                      options.hooks.on_recovery);
}

}  // namespace

absl::StatusOr<CoordinatorResult> RunCoordinator(const JobConfig& given_job, const CoordinatorOptions& given) {
  CoordinatorOptions options = given;
  RETURN_IF_ERROR(ApplyJobReplicas(given_job, options));
  const JobConfig job = WithConcreteExchange(given_job, options);
  RETURN_IF_ERROR(CheckStageDriverOptions(options));
  SetComputeThreads(job.threads);
  ASSIGN_OR_RETURN(JobSetup setup, SetUpJob(job, options));
  // Before any worker starts: a job that cannot evaluate (samples of a Wan model, prompts that do not encode) fails.
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingEvals> evals,
                   TrainingEvals::Create(job, *setup.model, *setup.cache, options.output_dir,
                                         PromptEncoderFor(job, options), setup.micro_batches, options.quiet));
  // A stop (SIGINT/SIGTERM, or the job service's) is honoured during start-up too: nothing to checkpoint yet.
  auto stop_requested = [&] { return StopRequested(options); };
  const absl::Status stopped_early = absl::CancelledError("stopped before the first step: nothing to checkpoint");
  if (stop_requested()) return stopped_early;
  std::unique_ptr<ReplicaSet> replicas = MakeReplicas(job, options, setup, stop_requested);
  RETURN_IF_ERROR(replicas->Start());
  if (stop_requested()) return stopped_early;

  Optimizer optimizer(job.optimizer);
  ASSIGN_OR_RETURN(StartState start, LoadStartState(job, options, replicas->pipeline(0), setup.fingerprint, optimizer));
  std::unique_ptr<PeerExchange> exchange;  // `replica_exchange: allreduce`: a stage-local optimizer
  if (job.replica_exchange == "allreduce") {
    exchange = std::make_unique<PeerExchange>(
        job.optimizer, replicas.get(), std::max(absl::Seconds(60), options.stall_timeout), options.host_state_copies);
    RETURN_IF_ERROR(exchange->Start(start.master, optimizer));
  }
  RETURN_IF_ERROR(MakeDirs(options.output_dir));
  if (start.resumed) {
    // The outputs a checkpoint promises are written after it: a run that died between the two (a full disk at the
    // final LoRA) left them stale or missing. A resume writes them again from the checkpoint, complete run or not.
    RETURN_IF_ERROR(Annotate(
        SaveLoraOutputs(options.output_dir, start.master, job, start.step, *setup.model, optimizer.StateDict()),
        absl::StrCat("rewriting the LoRA outputs of checkpoint step-", start.step)));
  }
  const std::string log_path = JoinPath(options.output_dir, "train_log.jsonl");
  if (start.resumed) RETURN_IF_ERROR(TrimTrainLog(log_path, start.step));
  ASSIGN_OR_RETURN(auto log, OpenTrainLog(options.output_dir, /*append=*/start.resumed));
  const int64_t total_steps = options.steps > 0 ? options.steps : job.steps;
  if (options.hooks.on_start) {
    std::vector<int64_t> planned, member;  // replica 0's workers: the sum of their chunks' estimates
    for (const std::vector<StageSpec>& chunks : setup.plans.at(0)) {
      int64_t bytes = 0, member_bytes = 0;
      for (const StageSpec& chunk : chunks) {
        bytes += chunk.est_memory_bytes;
        member_bytes += MemberBytes(chunk);
      }
      planned.push_back(bytes);
      member.push_back(member_bytes);
    }
    options.hooks.on_start({JobHash(job), start.step, total_steps, replicas->addresses(), std::move(planned),
                            std::move(member), FrozenPipelineKey(PipelineSpecFor(job), setup.plans.at(0))});
  }
  ASSIGN_OR_RETURN(CoordinatorResult result, TrainSteps(job, options, setup, *replicas, exchange.get(), optimizer,
                                                        start, total_steps, *log, *evals));
  RETURN_IF_ERROR(replicas->Stop());
  return result;
}

}  // namespace baton
