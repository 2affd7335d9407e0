// Data-parallel replicas of the pipeline: R StagePipelines over the same stage plan, driven as one: every step's
// micro-batches dealt out, the LoRA gradients summed.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/pipeline/partition.h"
#include "core/pipeline/replica_split.h"
#include "core/pipeline/schedule.h"
#include "stage_driver/driver_options.h"
#include "stage_driver/pipeline_spec.h"
#include "stage_driver/stage_pipeline.h"

namespace baton {

// What every replica's pipeline is set up with: the step's micro-batches over all replicas and what its plans carry.
struct ReplicaConfig {
  ScheduleKind schedule_kind = ScheduleKind::k1F1B;
  int chunks = 1;
  int micro_batches = 1;    // the step's, over all replicas
  float loss_scale = 1.0f;  // 1 / micro_batches
  uint64_t dropout_seed = 0;
  absl::Duration stall_timeout = absl::Seconds(15);
  bool split_by_speed = true;  // else evenly
  // A stage-local optimizer (PeerExchange; the job's `replica_exchange: allreduce`): the stages hold their gradients
  // and keep their adapters. A lost replica's finished slices are then lost with it and redone by the others.
  bool local_optimizer = false;
  // Every report of a stage that does not answer (stage_driver/outage_watch.h), with its global worker index.
  OnOutage on_outage;
};

// Every step's micro-batches are dealt out (core/pipeline/replica_split.h: in proportion to each replica's measured
// seconds per micro-batch, or evenly), each replica runs its contiguous slice (its stages number the slice's
// micro-batches from 0 and get the slice's first step-wide index for the dropout masks), and the replicas' LoRA
// gradients are summed in replica order: the mean gradient of the whole step, as one pipeline running every
// micro-batch computes it, up to float summation order. Inputs, noise and timesteps are the coordinator's, per sample
// and step, never per replica. A replica that loses a stage (it died, failed or stalled) leaves the step: its slice
// is dealt out to the others, reconfigured for a new generation, and the step completes without waiting for it; it
// is recovered in the background (a local worker restarted, a remote one waited for) and rejoins at a later step.
// With one replica a lost stage is recovered and the step redone (StagePipeline::RunStep), as before replicas, bit
// for bit.
class ReplicaSet {
 public:
  // `pipeline`: what every replica's stages hold. `options` (options.replicas pipelines of options.StagesOf(r)
  // workers) and `plans` ([replica] the planner's [worker][chunk] ranges) must outlive the set; `stop` is polled while
  // waiting for workers; `on_recovery` (optional) gets the global worker index (options.FirstWorker(replica) + stage)
  // of a lost stage. Replicas of different stage counts need a schedule that is not interleaved (a slice is a multiple
  // of the stages there).
  ReplicaSet(const PipelineSpec& pipeline, const StageDriverOptions& options,
             const std::vector<std::vector<std::vector<StageSpec>>>& plans, ReplicaConfig config,
             std::function<bool()> stop, StagePipeline::OnRecovery on_recovery);
  ~ReplicaSet();

  // Every replica's workers started (or taken), connected and configured, the replicas in parallel.
  absl::Status Start();
  int size() const { return static_cast<int>(pipelines_.size()); }
  StagePipeline& pipeline(int r);  // replica 0's runs the validation and sample passes
  // Waits for replica r's background recovery, if one is under way (before its pipeline is used between steps).
  void SettleReplica(int r);
  std::vector<std::string> addresses() const;  // every worker, replica after replica

  // The early push of step `step`'s data while the previous step runs: each replica its slice (the step's split is
  // decided here, once; StagePipeline::Prefetch). A replica whose slice stands is not fed the data again with the step.
  absl::Status Prefetch(int64_t step, const StepInputs& inputs) ABSL_LOCKS_EXCLUDED(mu_);
  // The replicas with a slice of step `step` (its split decided here, once, as Prefetch does): a stage-local optimizer
  // forms its peer groups over exactly these before the step (PeerExchange::BeforeStep), and then lets the stages
  // reduce as soon as they hold their gradients (Run's `reduce_when_held`).
  std::vector<int> StepReplicas(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // One step over every replica. `guard` (optional) runs before each replica's first slice of the step (from that
  // slice's thread; with one replica before every attempt): a stage-local optimizer loads a replica that came back
  // with the current state there (PeerExchange). `reduce_when_held`: the peer groups were formed over
  // StepReplicas(step) (later slices of the step, a lost replica's, never reduce early). The outputs: the summed
  // gradients, every micro-batch's loss in step order, and the split (replica_micro_batches).
  absl::StatusOr<StepOutputs> Run(int64_t step, const StepInputs& inputs,
                                  const std::map<std::string, at::Tensor>& master, SliceGuard* guard = nullptr,
                                  bool reduce_when_held = false) ABSL_LOCKS_EXCLUDED(mu_);
  // How often replica r has been taken out (lost) so far: a replica whose count moved was restarted or reconfigured
  // since, and holds nothing of the run's state that it held before.
  int Losses(int r) const ABSL_LOCKS_EXCLUDED(mu_);
  bool Ready(int r) const ABSL_LOCKS_EXCLUDED(mu_);
  // A replica failed (an attempt of its slice here, or the stage-local optimizer's reduction or update after Run): if
  // a recovery can mend it, the replica leaves the step and is recovered in the background, to rejoin at a later
  // step. Else the error.
  absl::Status TakeOut(int r, int64_t step, const absl::Status& failure) ABSL_LOCKS_EXCLUDED(mu_);
  // The step starts over on the ready replicas (each reconfigured for a new generation; the next Run splits the step
  // again and every replica starts a new held sum): what a stage-local optimizer does when a replica is lost after its
  // slice counted.
  absl::Status RestartStep(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // The run goes back to an earlier step (a stage-local optimizer's rollback): nothing recorded as split or held for
  // any step stands any more.
  void Rewind() ABSL_LOCKS_EXCLUDED(mu_);
  // The bytes exchanged with every stage of every replica so far, by kind.
  TrafficBytes Traffic() const;
  // The oldest push in flight to any stage of a ready replica, in seconds; and Cancel on every such client.
  double OldestPushSeconds() const;
  void CancelAll();
  // Local workers of every replica shut down; remote ones are left running. A replica still being recovered (a remote
  // worker that has not come back) is given up at once: the run's steps went on without it.
  absl::Status Stop();

 private:
  enum class State { kReady, kRecovering, kFailed };
  struct Slice {  // micro-batches [first, first + count) of a step, run by `replica`
    int replica = 0, first = 0, count = 0;
  };
  // The step's split over the ready replicas, decided once (again when a replica it counted on was lost since).
  std::vector<int> SplitFor(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One replica, one pipeline: its own recovery (restart, then redo), as before replicas.
  absl::StatusOr<StepOutputs> RunOne(int64_t step, const StepInputs& inputs,
                                     const std::map<std::string, at::Tensor>& master, SliceGuard* guard);
  // One attempt of each slice on its replica, all at once (no recovery); `guard` as Run's.
  // `reduce_when_held`: the slices are their replicas' only ones this step, over the step's peer groups.
  std::vector<absl::StatusOr<StepOutputs>> RunSlices(int64_t step, const StepInputs& inputs,
                                                     const std::vector<Slice>& slices,
                                                     const std::map<std::string, at::Tensor>& master, SliceGuard* guard,
                                                     bool reduce_when_held) ABSL_LOCKS_EXCLUDED(mu_);
  // The lost slices dealt out to the ready replicas by speed (into `todo`), each ready replica reconfigured first
  // (a new generation: it ran this step already). A pending slice of a replica lost meanwhile is dealt out too.
  absl::Status Reassign(int64_t step, std::vector<Slice> lost, std::vector<Slice>& todo) ABSL_LOCKS_EXCLUDED(mu_);
  // Every ready replica reconfigured (waiting for a recovery when none is ready); one whose Configure fails is taken
  // out and its pending slices move from `todo` to `lost`. The replicas reconfigured.
  absl::StatusOr<std::vector<int>> ReconfigureReady(int64_t step, std::vector<Slice>& todo, std::vector<Slice>& lost)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A new generation for each of `replicas` (they ran the step already, or hold its early data): their stages take
  // the step again from scratch. One whose Configure fails is taken out (TakeOut); those are returned.
  absl::StatusOr<std::set<int>> Reconfigure(const std::set<int>& replicas, int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  static void MoveSlicesOf(const std::set<int>& replicas, std::vector<Slice>& from, std::vector<Slice>& to);
  struct DoneSlice {
    int replica = 0;
    int losses = 0;  // the replica's Losses() when it finished the slice
    StepOutputs outputs;
  };
  using DoneSlices = std::map<int, DoneSlice>;  // by first micro-batch
  // A stage-local optimizer's finished slices whose replica was lost since (their sums were lost with it, even if it
  // is back already): out of `done`, to be dealt out again.
  std::vector<Slice> LostWithTheirReplica(DoneSlices& done) ABSL_LOCKS_EXCLUDED(mu_);
  void JoinRecoveries();
  // Replica r was lost (its pipeline reports it, whoever recovers it): the sums its stages held are gone.
  void ForgetHeld(int r) ABSL_LOCKS_EXCLUDED(mu_);
  int Unit() const;  // what slices are multiples of: the stages under an interleaved schedule, else 1
  std::vector<int> ReadyReplicas() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PublishTargets() const;

  const StageDriverOptions& options_;
  const ReplicaConfig config_;
  std::vector<std::unique_ptr<StagePipeline>> pipelines_;  // [replica]
  std::map<std::pair<int, int>, Schedule> schedules_;  // by (stages, micro-batches); filled by Start, then read-only
  std::vector<std::thread> recoveries_;  // [replica]; started and joined by the thread that calls Run and Stop
  // Set by Stop: the recoveries stop waiting for their workers.
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mu_;
  std::vector<State> state_ ABSL_GUARDED_BY(mu_);                    // [replica]
  std::vector<std::string> recovery_errors_ ABSL_GUARDED_BY(mu_);    // [replica], of a failed recovery
  std::map<int64_t, std::vector<int>> splits_ ABSL_GUARDED_BY(mu_);  // step → micro-batches per replica
  std::map<int64_t, std::set<int>> held_ ABSL_GUARDED_BY(mu_);       // step → replicas holding a sum of it
  ReplicaSpeeds speeds_ ABSL_GUARDED_BY(mu_);
};

// Slice [first, first + count) of a step's inputs (micro-batches and their shell outputs).
StepInputs SliceStepInputs(const StepInputs& inputs, int first, int count);

// The replicas' outputs (each ran ≥ 1 micro-batch; in replica order) as one step's: gradients summed by name in
// replica order, the last stage's losses concatenated; the stage timings are the first replica's.
absl::StatusOr<StepOutputs> MergeReplicaOutputs(std::vector<StepOutputs> outputs);

}  // namespace baton
