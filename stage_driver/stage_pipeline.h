// One pipeline of stage workers, as one object: it owns the stages' clients (StageFleet), their workers' lifecycle
// (StageSet: start, configure, recover), the stall watch, the early push of a step's data, and the calls that go to
// every stage at once; a step, a forward-only pass or the work between steps runs here and is redone after a lost
// stage. A replica set (coordinator/replica_set.h) drives several and recovers a lost one in the background instead.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stage_driver/driver_options.h"
#include "stage_driver/pipeline_spec.h"
#include "stage_driver/stage_fleet.h"
#include "stage_driver/stage_set.h"

namespace baton {

// Whether a failed step is worth redoing after a recovery: the stage (or its link) went away or stalled, as
// opposed to a deterministic error that would fail again. `stage_died`: a local worker was found dead.
bool RetryableStepFailure(const absl::Status& status, bool stage_died);

// What a failed attempt lost, as StagePipeline::Diagnose finds it.
struct StepLoss {
  bool retryable = false;  // a recovery can mend it (and no stop was asked for)
  int suspect = -1;        // the stage blamed: dead, else stalled; -1: a link or unknown
  std::string cause;       // how it was lost ("killed by signal 9 (Killed)", a stall's message, the error)
  std::string what;        // the line for messages: "stage 1 (host:port) lost: killed by signal 9 (Killed)"
};

// What must hold before a pipeline runs an attempt of a step's slice (a stage-local optimizer: its stages hold the
// run's adapters and optimizer state, loaded again where a restarted stage lost them: PeerExchange). A failure fails
// the attempt as it is.
class SliceGuard {
 public:
  virtual ~SliceGuard() = default;
  virtual absl::Status BeforeSlice(int replica) = 0;
};

// When a stage is lost (it died, failed with UNAVAILABLE/CANCELLED/DEADLINE_EXCEEDED, or the stall watch blamed it)
// the pipeline aborts the work everywhere, brings the stage back and redoes it with the same inputs and adapters -- up
// to StageDriverOptions::step_retries times, then a clean failure naming the stage. A redone step computes exactly
// what the first attempt would have: the inputs are kept, the adapters are the same masters, the RoPE mirrors restart
// empty with the stages' caches, and dropout seeds depend only on (step, micro-batch). A replica set uses the pieces
// instead (TryStep, Diagnose, ReportLoss, Recover): a one-replica run lets RunStep recover and redo.
//
// Thread-safe where said: Prefetch, Traffic, OldestPushSeconds, CancelAll and Losses from any thread; the rest from
// the thread that drives the pipeline (one step, pass or recovery at a time).
class StagePipeline {
 public:
  // A lost step or pass (`step` 1-based for a step, the step it follows for a pass), as soon as the loss is noticed,
  // before the recovery: the stage blamed (-1: a link or unknown) and what happened.
  using OnRecovery = std::function<void(int64_t step, int stage, const std::string& cause)>;

  // `spec`: what every stage holds; its id is the pipeline's (settings.job_id is set from it). `plan`: [worker][chunk]
  // block ranges (PlanStages). `options` outlives the pipeline; `stop` is polled while waiting for workers and between
  // attempts; `on_recovery` is optional. `replica`: which of options.replicas pipelines this is (its workers, devices
  // and metrics ports are that replica's: global worker index options.FirstWorker(replica) + stage).
  StagePipeline(PipelineSpec spec, const StageDriverOptions& options, std::vector<std::vector<StageSpec>> plan,
                FleetSettings settings, std::function<bool()> stop, OnRecovery on_recovery = nullptr, int replica = 0);
  ~StagePipeline();

  // Starts (local) or takes (remote) the workers, connects to and configures each.
  absl::Status Start();
  // Local workers asked to shut down and stopped; remote ones are left running (StageSet::Stop).
  absl::Status Stop() ABSL_LOCKS_EXCLUDED(mu_);

  int size() const { return fleet_.size(); }
  int replica() const { return stages_->replica(); }
  const std::string& id() const { return fleet_.job_id(); }
  const std::string& run_id() const { return fleet_.run_id(); }
  uint64_t generation() const { return fleet_.generation(); }  // raised by every recovery and reconfiguration
  std::string StageName(int stage) const { return fleet_.name(stage); }
  const std::vector<std::string>& params(int stage) const { return fleet_.params(stage); }  // its LoRA parameters
  const std::vector<std::string>& addresses() const { return stages_->addresses(); }
  LocalWorkers* local() { return stages_->local(); }  // null for remote workers

  // `slice` of step `step` (0-based), from `inputs`, recovered and redone as above; `guard` (optional) before every
  // attempt. The step's data is fed with it unless an early push of exactly this slice (Prefetch) still stands.
  absl::StatusOr<StepOutputs> RunStep(int64_t step, const StepSlice& slice, const StepInputs& inputs,
                                      const std::map<std::string, at::Tensor>& master, SliceGuard* guard = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One attempt of it, no recovery (a replica set deals a lost replica's slice to the others).
  absl::StatusOr<StepOutputs> TryStep(int64_t step, const StepSlice& slice, const StepInputs& inputs,
                                      const std::map<std::string, at::Tensor>& master) ABSL_LOCKS_EXCLUDED(mu_);
  // A forward-only pass (validation, sampling) after training step `step`: each micro-batch's model output, with the
  // adapters in `master`; a lost stage is recovered and the pass redone, as a step is.
  absl::StatusOr<std::vector<at::Tensor>> RunForwardPass(int64_t step, uint64_t pass,
                                                         const std::vector<ShellOutputs>& shell,
                                                         const std::map<std::string, at::Tensor>& master);
  // Work with the stages between steps (the state read back for a checkpoint or a pass, `what_ran` names it in
  // messages): a lost stage is recovered and the work redone, as a step is. A restarted stage holds no state of the
  // run: work that needs it finds that out itself (PeerExchange::Pull) and fails with DATA_LOSS, which ends the
  // retries.
  absl::Status RunBetweenSteps(int64_t step, const std::string& what_ran, const std::function<absl::Status()>& work);

  // The early push of step `step`'s data (its micro-batches [first, first + inputs' count) of the step) while the
  // step before it runs: the constants, inputs and targets, no RoPE tables, no weights. Remembered until the stages
  // are configured again (a recovery, Reconfigure); skipped while a recovery is under way, which waits for a push in
  // flight (cancelling one that hangs).
  absl::Status Prefetch(int64_t step, int first, const StepInputs& inputs) ABSL_LOCKS_EXCLUDED(mu_);

  // Every stage's current adapters by PEFT name (at the start: their seeded init); with `optimizer_state`, a
  // stage-local optimizer's state beside them (the run's state, read back).
  absl::StatusOr<std::map<std::string, at::Tensor>> Adapters(bool optimizer_state = false);
  // call(client, stage) for every stage at once, under the outage watch (StageFleet::CallEach); each stage's status.
  std::vector<absl::Status> CallEach(const std::string& doing,
                                     const std::function<absl::Status(StageClient&, int stage)>& call);

  // Who a failed attempt lost and whether a recovery can mend it (waits up to 0.5 s for a dying local worker).
  StepLoss Diagnose(const absl::Status& failure) const;
  // What every recovery does, whether the work is then redone here or dealt out to other replicas while this one
  // comes back: the loss reported at once (ReportLoss: counted, its early push forgotten, on_recovery told; `step`
  // as there), then the stages brought back (Recover: StageSet::Recover). Stages lost again while they come back are
  // reported and brought back again, each time counted in *retry, while *retry < step_retries. `what_ran` names the
  // work in messages. The stages restarted or waited for, or the error naming the loss.
  void ReportLoss(int64_t step, const StepLoss& loss) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<int>> Recover(int64_t step, const std::string& what_ran, const StepLoss& loss, int* retry)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every stage configured again for a new generation (their inboxes emptied: they take a step again from scratch).
  absl::Status Reconfigure() ABSL_LOCKS_EXCLUDED(mu_);
  // How often the pipeline was lost so far: one whose count moved was restarted or reconfigured since, and holds
  // nothing of the run's state that it held before.
  int Losses() const ABSL_LOCKS_EXCLUDED(mu_);

  // The bytes exchanged with every stage so far; the oldest push in flight (seconds); Cancel on every client.
  // A recovering pipeline's clients are its recovery's: 0 and nothing.
  TrafficBytes Traffic() const ABSL_LOCKS_EXCLUDED(mu_);
  double OldestPushSeconds() const ABSL_LOCKS_EXCLUDED(mu_);
  void CancelAll() ABSL_LOCKS_EXCLUDED(mu_);

  // The stages as the driver talks to them, for the driver's own tests (stage_driver/testing/).
  StageFleet& fleet_for_testing() { return fleet_; }
  StageSet& stages_for_testing() { return *stages_; }

 private:
  // The early push that stands: step `step`'s micro-batches [first, first + count), sent at `generation`.
  struct Pushed {
    int64_t step = -1;
    int first = 0, count = 0;
    uint64_t generation = 0;
  };
  // Runs attempt(retry) until it succeeds; after a failure that a recovery can mend (a stage lost or stalled), brings
  // the stages back and tries again, up to step_retries times. `what_ran` names the work in messages ("step 4",
  // "pass 3 (after step 2)"); `hook_step` goes to on_recovery.
  template <typename Out>
  absl::StatusOr<Out> WithRecovery(int64_t hook_step, const std::string& what_ran,
                                   const std::function<absl::StatusOr<Out>(int retry)>& attempt);
  // Whether the stages hold `slice`'s data of step `step` from an early push.
  bool Prefetched(int64_t step, const StepSlice& slice, int count) const ABSL_LOCKS_EXCLUDED(mu_);
  // Before the clients are replaced or the inboxes emptied: a push in flight finished (cancelled after a second),
  // none started until Settled(); the early push forgotten.
  void Unsettle() ABSL_LOCKS_EXCLUDED(mu_);
  void Settled() ABSL_LOCKS_EXCLUDED(mu_);

  const StageDriverOptions& options_;
  std::function<bool()> stop_;
  OnRecovery on_recovery_;
  StageFleet fleet_;
  std::unique_ptr<StageSet> stages_;
  // Guards the early push against a recovery, and the loss count. Never held across a call to the stages.
  mutable absl::Mutex mu_;
  Pushed pushed_ ABSL_GUARDED_BY(mu_);
  int pushing_ ABSL_GUARDED_BY(mu_) = 0;        // early pushes in flight
  bool settling_ ABSL_GUARDED_BY(mu_) = false;  // a recovery or reconfiguration is under way
  int losses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton
