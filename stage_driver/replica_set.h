// Data-parallel replicas of the pipeline: R pipelines over the same stage plan, each with a StageFleet, StageSet and
// StepExecutor of its own, driven as one: every step's micro-batches dealt out, the LoRA gradients summed.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/pipeline/partition.h"
#include "core/pipeline/replica_split.h"
#include "core/pipeline/schedule.h"
#include "core/train/job.h"
#include "stage_driver/driver_options.h"
#include "stage_driver/stage_fleet.h"
#include "stage_driver/stage_set.h"
#include "stage_driver/step_executor.h"

namespace baton {

// What every replica's fleet is set up with: the step's micro-batches over all replicas and what its plans carry.
struct ReplicaFleetConfig {
  std::string job_id;
  ScheduleKind schedule_kind = ScheduleKind::k1F1B;
  int chunks = 1;
  int micro_batches = 1;    // the step's, over all replicas
  float loss_scale = 1.0f;  // 1 / micro_batches
  uint64_t dropout_seed = 0;
  absl::Duration stall_timeout = absl::Seconds(15);
  bool split_by_speed = true;  // else evenly
};

// Every step's micro-batches are dealt out (core/pipeline/replica_split.h: in proportion to each replica's measured
// seconds per micro-batch, or evenly), each replica runs its contiguous slice (its stages number the slice's
// micro-batches from 0 and get the slice's first step-wide index for the dropout masks), and the replicas' LoRA
// gradients are summed in replica order: the mean gradient of the whole step, as one pipeline running every
// micro-batch computes it, up to float summation order. Inputs, noise and timesteps are the coordinator's, per sample
// and step, never per replica. A replica that loses a stage recovers it and redoes its slice as a single pipeline
// does (StepExecutor); the other replicas' results wait for it. R = 1 is the plain pipeline, bit for bit.
class ReplicaSet {
 public:
  // `job`, `options` (options.replicas pipelines of options.stages workers) and `plan` must outlive the set; `stop`
  // is polled while waiting for workers; `on_recovery` (optional) gets the global worker index (replica · stages +
  // stage) of a lost stage.
  ReplicaSet(const JobConfig& job, const StageDriverOptions& options, const std::vector<std::vector<StageSpec>>& plan,
             ReplicaFleetConfig config, std::function<bool()> stop, StepExecutor::OnRecovery on_recovery);
  ~ReplicaSet();

  // Every replica's workers started (or taken), connected and configured, the replicas in parallel.
  absl::Status Start();
  int size() const { return static_cast<int>(replicas_.size()); }
  StageFleet& fleet(int r);
  StepExecutor& executor(int r);               // replica 0's runs the validation and sample passes
  std::vector<std::string> addresses() const;  // every worker, replica after replica

  // The early push of step `step`'s data while the previous step runs: each replica its slice (the step's split is
  // decided here, once). A replica whose push succeeded is not fed the data again with the step.
  absl::Status PushData(int64_t step, const StepInputs& inputs) ABSL_LOCKS_EXCLUDED(mu_);
  // One step over every replica. `on_started` runs once every replica has its work; `on_abort` runs (serialised)
  // whenever a replica's attempt failed, before its recovery (StepExecutor::Run). The outputs: the summed
  // gradients, every micro-batch's loss in step order, and the split (replica_micro_batches).
  absl::StatusOr<StepOutputs> Run(int64_t step, const StepInputs& inputs,
                                  const std::map<std::string, at::Tensor>& master,
                                  const std::function<void()>& on_started, const std::function<void()>& on_abort)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The oldest push in flight to any stage of any replica, in seconds; and Cancel on every client.
  double OldestPushSeconds() const;
  void CancelAll();
  // Local workers of every replica shut down; remote ones are left running.
  absl::Status Stop();

 private:
  struct Replica {
    StageFleet fleet;
    std::unique_ptr<StageSet> stages;
    std::unique_ptr<StepExecutor> executor;
  };
  std::vector<int> SplitFor(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunReplica(int r, int64_t step, const StepInputs& inputs, const std::vector<int>& split,
                          const std::map<std::string, at::Tensor>& master, const std::function<void()>& on_started,
                          const std::function<void()>& on_abort, StepOutputs* out) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PublishTargets() const;

  const StageDriverOptions& options_;
  const ReplicaFleetConfig config_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::map<int, Schedule> schedules_;  // by micro-batches; filled before any replica runs (Run)
  absl::Mutex abort_mu_;               // serialises the callers' on_abort across replica threads
  mutable absl::Mutex mu_;
  std::map<int64_t, std::vector<int>> splits_ ABSL_GUARDED_BY(mu_);  // step → micro-batches per replica
  std::map<int64_t, std::set<int>> pushed_ ABSL_GUARDED_BY(mu_);     // step → replicas holding its early push
  ReplicaSpeeds speeds_ ABSL_GUARDED_BY(mu_);
};

// Slice [first, first + count) of a step's inputs (micro-batches and their shell outputs).
StepInputs SliceStepInputs(const StepInputs& inputs, int first, int count);

// The replicas' outputs (each ran ≥ 1 micro-batch; in replica order) as one step's: gradients summed by name in
// replica order, the last stage's losses concatenated; the stage timings are the first replica's.
absl::StatusOr<StepOutputs> MergeReplicaOutputs(std::vector<StepOutputs> outputs);

}  // namespace baton
