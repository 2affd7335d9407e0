// The coordinator's training loop: the only owner of trainable state. Each step it draws the micro-batches
// (the same sampler as train-local), computes the frozen shell's constants, fans inputs/constants/targets
// out to the stages, drives the schedule (every stage runs its own action list; activations and gradients
// flow stage to stage directly), gathers each stage's LoRA gradients, clips and steps AdamW on the fp32
// master weights, and sends each stage its new adapters before its next forward.
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sample/training_evals.h"
#include "core/train/job.h"
#include "core/train/local_trainer.h"

namespace baton {

struct PipelineStepRecord;

// What a run reports as it goes, for whoever watches it (the metrics, the job service). Every hook is
// optional and runs on the coordinator's thread, so it must be quick.
struct RunStart {
  std::string job_id;                  // the job hash the stages were configured with
  int64_t first_step = 0;              // 0, or the checkpoint step a resumed run starts from
  int64_t total_steps = 0;             // the step the run ends at
  std::vector<std::string> addresses;  // stage workers, by stage
};
struct CoordinatorHooks {
  std::function<void(const RunStart&)> on_start;                    // stages configured, before the first step
  std::function<void(const PipelineStepRecord&)> on_step;           // after each optimizer step
  std::function<void(int64_t step, double seconds)> on_checkpoint;  // a checkpoint written
  std::function<void(const EvalReport&)> on_eval;                   // a validation and/or samples finished
  // A lost step (1-based), as soon as the loss is noticed, before the recovery: the stage blamed (-1: a link or
  // unknown) and what happened.
  std::function<void(int64_t step, int stage, const std::string& cause)> on_recovery;
  const std::atomic<bool>* stop = nullptr;  // set: finish the step, checkpoint, return (like SIGTERM)
};

struct CoordinatorOptions {
  int stages = 1;
  std::vector<std::string> workers;  // host:port per stage; empty = start local stage workers
  int64_t steps = 0;                 // ≤ 0: the job's
  std::string output_dir = "out/run";
  bool resume = false;         // continue from the newest valid checkpoint in output_dir; refuse when there is none
  bool resume_if_any = false;  // with resume: no checkpoint at all → start fresh (--resume=if-any)
  absl::Duration rpc_timeout = absl::Seconds(300);     // any one RPC, including a whole step
  absl::Duration connect_timeout = absl::Seconds(20);  // waiting for a worker to answer at all
  std::string stage_worker_binary;                     // embedded mode; default: next to this binary
  int worker_wait_timeout_s = 0;                       // embedded workers' peer wait (0 = rpc_timeout)
  bool quiet = false;                                  // no per-step lines on stdout
  // Worker loss (a stage dies, fails mid-step or stalls): the step is aborted everywhere and redone, up to
  // step_retries times per step (0: the first loss fails the run), once the lost stage is back: a local worker
  // restarted here, a remote one answering at its address again, within worker_restart_timeout.
  int step_retries = 3;
  absl::Duration worker_restart_timeout = absl::Seconds(60);
  // A stage whose step makes no progress (no heartbeat, or a push in flight) this long counts as lost: well above
  // the stages' 1 s heartbeat on a loaded machine, far below the 300 s rpc_timeout.
  absl::Duration stall_timeout = absl::Seconds(15);
  // Metrics (coordinator/coordinator_metrics.h): --metrics as given ("HOST:PORT"; empty = off) and where the
  // coordinator's own server is bound. Local stage workers serve theirs on HOST:PORT+1+i (PORT 0: free ports);
  // the run prints them all and writes <output_dir>/prometheus_targets.json.
  std::string metrics_listen, metrics_address;
  CoordinatorHooks hooks;
};

struct StageStepStats {
  double forward_seconds = 0, backward_seconds = 0, idle_seconds = 0;
};

struct PipelineStepRecord : StepRecord {
  std::vector<StageStepStats> stages;
  // The coordinator's own serial work in the step (train_log.jsonl: coordinator_seconds): waiting for the
  // step's micro-batches and shell outputs before the stages can start (~0 after the first step: they
  // are prepared while the stages run the previous step), and gradient clipping + AdamW after they finish.
  double prepare_seconds = 0, optimizer_seconds = 0;
};

struct CoordinatorResult {
  std::vector<PipelineStepRecord> steps;
  int64_t first_step = 0;  // 0, or the checkpoint step a resumed run started from
};

absl::StatusOr<CoordinatorResult> RunCoordinator(const JobConfig& job, const CoordinatorOptions& options);

// Asks a running RunCoordinator to finish the current step, checkpoint and return (SIGTERM handler).
void RequestCoordinatorStop();

}  // namespace baton
