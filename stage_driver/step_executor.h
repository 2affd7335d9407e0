// The step executor: runs one training step over the stage set and, when a stage is lost mid-step (it died,
// failed with UNAVAILABLE/CANCELLED/DEADLINE_EXCEEDED, or the stall watch blamed it), aborts the step everywhere,
// brings the stage back (StageSet::Recover) and redoes the step with the same inputs and adapters -- up to
// StageDriverOptions::step_retries times per step, then a clean failure naming the stage. A redone step computes
// exactly what the first attempt would have: the inputs are kept, the adapters are the same masters, the RoPE
// mirrors restart empty with the stages' caches, and dropout seeds depend only on (step, micro-batch).
#pragma once

#include <absl/status/statusor.h>

#include <functional>
#include <map>
#include <string>

#include "stage_driver/driver_options.h"
#include "stage_driver/stage_fleet.h"
#include "stage_driver/stage_set.h"

namespace baton {

// Whether a failed step is worth redoing after a recovery: the stage (or its link) went away or stalled, as
// opposed to a deterministic error that would fail again. `stage_died`: a local worker was found dead.
bool RetryableStepFailure(const absl::Status& status, bool stage_died);

// What a failed attempt lost, as StepExecutor::Diagnose finds it.
struct StepLoss {
  bool retryable = false;  // a recovery can mend it (and no stop was asked for)
  int suspect = -1;        // the stage blamed: dead, else stalled; -1: a link or unknown
  std::string cause;       // how it was lost ("killed by signal 9 (Killed)", a stall's message, the error)
  std::string what;        // the line for messages: "stage 1 (host:port) lost: killed by signal 9 (Killed)"
};

class StepExecutor {
 public:
  // A lost step or pass (`step` 1-based for a step, the step it follows for a pass), as soon as the loss is noticed,
  // before the recovery: the stage blamed (-1: a link or unknown) and what happened.
  using OnRecovery = std::function<void(int64_t step, int stage, const std::string& cause)>;

  // Everything must outlive the executor; `stop` is polled between attempts; `on_recovery` is optional.
  StepExecutor(const StageDriverOptions& options, StageFleet* fleet, StageSet* stages, std::function<bool()> stop,
               OnRecovery on_recovery = nullptr);

  // `slice` of step `step` (0-based), from `inputs`. `on_started` runs once the first attempt's stages have their work
  // (the trainer prepares the next step meanwhile); `on_abort` runs after a failed attempt, before any recovery, and
  // must finish whatever on_started began with the fleet (its early pushes for the next step, which the recovery
  // discards).
  absl::StatusOr<StepOutputs> Run(int64_t step, const StepSlice& slice, StepInputs& inputs,
                                  const std::map<std::string, at::Tensor>& master,
                                  const std::function<void()>& on_started, const std::function<void()>& on_abort);
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
  // Runs before every attempt of a step (the first and each redo): a failure fails the step as it is (a stage-local
  // optimizer checks here that the stages still hold the run's state: PeerExchange::Prepare).
  void set_before_attempt(std::function<absl::Status()> before) { before_attempt_ = std::move(before); }
  // Who a failed attempt lost and whether a recovery can mend it (waits up to 0.5 s for a dying local worker).
  StepLoss Diagnose(const absl::Status& failure) const;

  // What every recovery does, whether the work is then redone on these stages (Run, RunForwardPass, RunBetweenSteps)
  // or dealt out to other replicas while these come back (a replica set's policy): the loss reported at once
  // (ReportLoss: on_recovery, `step` as there), then the stages brought back (Recover: StageSet::Recover). Stages lost
  // again while they come back are reported and brought back again, each time counted in *retry, while *retry <
  // step_retries. `what_ran` names the work in messages. The stages restarted or waited for, or the error naming the
  // loss.
  void ReportLoss(int64_t step, const StepLoss& loss);
  absl::StatusOr<std::vector<int>> Recover(int64_t step, const std::string& what_ran, const StepLoss& loss, int* retry);

 private:
  // Runs attempt(retry) until it succeeds; after a failure that a recovery can mend (a stage lost or stalled), brings
  // the stages back and tries again, up to step_retries times. `what_ran` names the work in messages ("step 4",
  // "pass 3 (after step 2)"); `hook_step` goes to on_recovery.
  template <typename Out>
  absl::StatusOr<Out> WithRecovery(int64_t hook_step, const std::string& what_ran,
                                   const std::function<absl::StatusOr<Out>(int retry)>& attempt,
                                   const std::function<void()>& on_abort, const std::function<void()>& on_recovered);

  const StageDriverOptions& options_;
  StageFleet* fleet_;
  StageSet* stages_;
  std::function<bool()> stop_;
  OnRecovery on_recovery_;
  std::function<absl::Status()> before_attempt_;
};

}  // namespace baton
