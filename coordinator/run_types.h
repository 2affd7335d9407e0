// What a training run over the stages is given and gives back: its options (the stage driver's plus the run's own),
// the hooks through which a watcher follows it, and its per-step records. The types only; the trainer that runs them
// is coordinator/pipeline_trainer.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sample/training_evals.h"
#include "core/train_local/local_trainer.h"
#include "stage_driver/driver_options.h"
#include "stage_driver/outage_watch.h"

namespace baton {

struct PipelineStepRecord;

// What a run reports as it goes, for whoever watches it (the metrics, the job service). Every hook is
// optional and runs on the coordinator's thread, so it must be quick.
struct RunStart {
  std::string job_id;                  // the job hash the stages were configured with
  int64_t first_step = 0;              // 0, or the checkpoint step a resumed run starts from
  int64_t total_steps = 0;             // the step the run ends at
  std::vector<std::string> addresses;  // stage workers, by stage
  std::vector<int64_t> planned_bytes;  // the planner's memory estimate of replica 0's stage workers, by stage
  // The share of it one more run beside this one on the same workers costs: its adapters (and optimizer state where
  // the stages hold it) and its in-flight activations; the frozen weights, transient and overhead are shared.
  std::vector<int64_t> member_bytes;
  // What replica 0's stage workers hold of the frozen weights (FrozenPipelineKey of the run's own plan): a job shares
  // them with this run only with an equal key.
  std::string frozen_key;
};
struct CoordinatorHooks {
  std::function<void(const RunStart&)> on_start;                    // stages configured, before the first step
  std::function<void(const PipelineStepRecord&)> on_step;           // after each optimizer step
  std::function<void(int64_t step, double seconds)> on_checkpoint;  // a checkpoint written
  std::function<void(const EvalReport&)> on_eval;                   // a validation and/or samples finished
  // A lost step (1-based), as soon as the loss is noticed, before the recovery: the stage blamed (-1: a link or
  // unknown) and what happened. From the run's thread, or from a replica's background recovery when its stages are
  // lost again while they come back (thread-safe, as on_outage).
  std::function<void(int64_t step, int stage, const std::string& cause)> on_recovery;
  // A stage worker that does not answer (stage_driver/outage_watch.h), from any thread: a notice once it has been
  // silent for half the stall timeout, then every stall timeout, and when it is back; between them refreshes (≤ 1/s).
  OnOutage on_outage;
  // A step's (0-based) micro-batches have all run; its optimizer step is next (tests stop a worker here).
  std::function<void(int64_t step)> before_update;
  // Once set: finish the step, checkpoint, return. The owner sets it: main's SIGINT/SIGTERM handler, or the job
  // service for the job it stops.
  const std::atomic<bool>* stop = nullptr;
};

// The stage driver's options (stages, workers, timeouts, recovery, metrics) and the run's own.
struct CoordinatorOptions : StageDriverOptions {
  CoordinatorOptions() {
    replicas = 0;  // 0: the job's `replicas:` (1 when it has none); --replicas sets it
    process = "coordinator";
  }
  int64_t steps = 0;           // ≤ 0: the job's
  bool resume = false;         // continue from the newest valid checkpoint in output_dir; refuse when there is none
  bool resume_if_any = false;  // with resume: no checkpoint at all → start fresh (--resume=if-any)
  // A stage-local optimizer of one replica: each stage keeps its state in host shared memory as well, so a worker
  // restarted on the same host costs one step (PeerExchange; --host_state_copies).
  bool host_state_copies = true;
  CoordinatorHooks hooks;
};

struct StageStepStats {
  double forward_seconds = 0, backward_seconds = 0, idle_seconds = 0;
  uint64_t memory_bytes = 0;  // what the stage held (v1::StepSummary.memory_bytes); 0: unknown
  // On CUDA (v1::StepSummary): the device's seconds in the actions and the peak reserved bytes; 0 on the CPU.
  double device_seconds = 0;
  uint64_t memory_reserved_bytes = 0;
};

// What a stage computed in the step, as users see it (the progress line, the job service): on CUDA the device's own
// time, from events (the host's clock there times the launches); elsewhere forward + backward.
inline double BusySeconds(const StageStepStats& s) {
  return s.device_seconds > 0 ? s.device_seconds : s.forward_seconds + s.backward_seconds;
}

struct PipelineStepRecord : StepRecord {
  std::vector<StageStepStats> stages;
  // The coordinator's own serial work in the step (train_log.jsonl: coordinator_seconds): waiting for the
  // step's micro-batches and shell outputs before the stages can start (~0 after the first step: they
  // are prepared while the stages run the previous step), and gradient clipping + AdamW after they finish.
  double prepare_seconds = 0, optimizer_seconds = 0;
  // With `replica_exchange: allreduce`: the slowest stage's allreduce of the step's gradients (optimizer_seconds then
  // is the whole exchange: any regrouping, the reduction and the stages' updates).
  double exchange_seconds = 0;
  bool exchange_early = false;  // every stage began its sum as soon as it held its gradients (behind the backwards)
  std::vector<int> replica_micro_batches;          // with replicas: how many of the step's micro-batches each ran
  std::vector<double> replica_samples_per_second;  // with replicas: each one's samples over its own seconds
  // Bytes between the coordinator and every stage during the step (train_log.jsonl: coordinator_link_bytes): `data`
  // (activations, inputs, constants, targets, RoPE tables), `adapters` (the LoRA, its gradients and state), `control`
  // (plans, summaries, the stage-local optimizer's calls) and `heartbeats` (the stall watch's, one a second a stage).
  uint64_t link_data_bytes = 0, link_adapter_bytes = 0, link_control_bytes = 0, link_heartbeat_bytes = 0;
};

struct CoordinatorResult {
  std::vector<PipelineStepRecord> steps;
  int64_t first_step = 0;    // 0, or the checkpoint step a resumed run started from
  int64_t steps_redone = 0;  // steps run again after a stage-local optimizer's state was lost (rollbacks)
};

}  // namespace baton
