#include "stage_driver/step_executor.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <chrono>
#include <thread>

#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {

bool RetryableStepFailure(const absl::Status& status, bool stage_died) {
  if (stage_died) return true;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:       // the process or its host went away
    case absl::StatusCode::kCancelled:         // by the death of a peer, or by the stall watch
    case absl::StatusCode::kDeadlineExceeded:  // a stall, or a wait for a lost peer
    case absl::StatusCode::kAborted:
      return true;
    case absl::StatusCode::kFailedPrecondition:  // a remote worker restarted under us: it has no job yet
      return absl::StrContains(status.message(), "before Configure");
    default:
      return false;
  }
}

StepExecutor::StepExecutor(const StageDriverOptions& options, StageFleet* fleet, StageSet* stages,
                           std::function<bool()> stop, OnRecovery on_recovery)
    : options_(options), fleet_(fleet), stages_(stages), stop_(std::move(stop)), on_recovery_(std::move(on_recovery)) {}

absl::StatusOr<StepOutputs> StepExecutor::Run(int64_t step, const StepSlice& slice, StepInputs& inputs,
                                              const std::map<std::string, at::Tensor>& master,
                                              const std::function<void()>& on_started,
                                              const std::function<void()>& on_abort) {
  return WithRecovery<StepOutputs>(
      step + 1, absl::StrCat("step ", step + 1),
      [&](int retry) -> absl::StatusOr<StepOutputs> {
        if (before_attempt_) RETURN_IF_ERROR(before_attempt_());
        return fleet_->RunStep(step, slice, inputs, master, retry == 1 ? on_started : nullptr);
      },
      [&] {
        if (on_abort) on_abort();
      },
      [&] { inputs.data_pushed = false; });  // the recovery emptied the stages' inboxes
}

absl::StatusOr<std::vector<at::Tensor>> StepExecutor::RunForwardPass(int64_t step, uint64_t pass,
                                                                     const std::vector<ShellOutputs>& shell,
                                                                     const std::map<std::string, at::Tensor>& master) {
  return WithRecovery<std::vector<at::Tensor>>(
      step, absl::StrCat("pass ", pass, " (after step ", step, ")"),
      [&](int) { return fleet_->RunForwardPass(step, pass, shell, master); }, [] {}, [] {});
}

absl::Status StepExecutor::RunBetweenSteps(int64_t step, const std::string& what_ran,
                                           const std::function<absl::Status()>& work) {
  return WithRecovery<bool>(
             step, what_ran,
             [&](int) -> absl::StatusOr<bool> {
               RETURN_IF_ERROR(work());
               return true;
             },
             [] {}, [] {})
      .status();
}

StepLoss StepExecutor::Diagnose(const absl::Status& failure) const {
  const int p = fleet_->size();
  // Who is gone: dead local processes (how they died is the best cause), else the stage a stall was blamed on.
  // A killed worker's connections break while it is still exiting: give it a moment to be reaped.
  auto any_dead = [&] {
    for (int i = 0; stages_->local() != nullptr && i < p; ++i) {
      if (!stages_->local()->Alive(i)) return true;
    }
    return false;
  };
  for (int i = 0; i < 25 && stages_->local() != nullptr && fleet_->last_stall.stage < 0 && !any_dead(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<int> dead;
  std::string cause;
  for (int i = 0; stages_->local() != nullptr && i < p; ++i) {
    if (!stages_->local()->Alive(i)) {
      dead.push_back(i);
      absl::StrAppend(&cause, cause.empty() ? "" : "; ", fleet_->clients[i]->name(), ": ", stages_->Describe(i));
    }
  }
  StepLoss loss;
  loss.suspect = dead.empty() ? fleet_->last_stall.stage : dead.front();
  if (dead.size() == 1) cause = stages_->Describe(dead.front());  // the line names the stage already
  if (cause.empty() && !fleet_->last_stall.message.empty()) cause = fleet_->last_stall.message;
  if (cause.empty()) cause = std::string(failure.message());
  loss.cause = cause;
  loss.retryable = !stop_() && RetryableStepFailure(failure, !dead.empty());
  // "stage 1 (host:port) lost: killed by signal 9 (Killed)"; a stall's or an error's message names its stage.
  loss.what = dead.size() == 1 ? absl::StrCat(fleet_->clients[dead.front()]->name(), " lost: ", cause) : cause;
  return loss;
}

void StepExecutor::ReportLoss(int64_t step, const StepLoss& loss) {
  if (on_recovery_) on_recovery_(step, loss.suspect, loss.cause);
}

absl::StatusOr<std::vector<int>> StepExecutor::Recover(int64_t step, const std::string& what_ran, const StepLoss& loss,
                                                       int* retry) {
  auto lost = stages_->Recover(loss.suspect);
  while (!lost.ok() && !absl::IsDeadlineExceeded(lost.status()) && RetryableStepFailure(lost.status(), false) &&
         *retry < options_.step_retries && !stop_()) {
    // Lost again during the recovery (e.g. killed while it restarted): recover again, counted as a retry.
    LogWarning(what_ran, ": ", loss.what, "; the recovery failed (", lost.status().message(), "), retry ", *retry, "/",
               options_.step_retries);
    ReportLoss(step, loss);
    ++*retry;
    lost = stages_->Recover(-1);
  }
  if (!lost.ok()) {
    return absl::Status(lost.status().code(), absl::StrCat(what_ran, ": ", loss.what, "; ", lost.status().message()));
  }
  return lost;
}

template <typename Out>
absl::StatusOr<Out> StepExecutor::WithRecovery(int64_t hook_step, const std::string& what_ran,
                                               const std::function<absl::StatusOr<Out>(int retry)>& attempt,
                                               const std::function<void()>& on_abort,
                                               const std::function<void()>& on_recovered) {
  for (int retry = 1;; ++retry) {
    auto out = attempt(retry);
    if (out.ok()) return out;
    on_abort();
    const StepLoss loss = Diagnose(out.status());
    if (!loss.retryable) return out.status();
    const std::string& what = loss.what;
    if (retry > options_.step_retries) {
      return absl::Status(out.status().code(),
                          absl::StrCat(what_ran, ": ", what,
                                       options_.step_retries > 0 ? absl::StrCat("; ", what_ran, " failed ", retry,
                                                                                " times, giving up (--step_retries ",
                                                                                options_.step_retries, ")")
                                                                 : " (recovery is off: --step_retries 0)"));
    }
    ReportLoss(hook_step, loss);
    ASSIGN_OR_RETURN(std::vector<int> lost, Recover(hook_step, what_ran, loss, &retry));
    LogWarning(what_ran, ": ", what, "; ", lost.empty() ? "reconfigured" : (stages_->local() ? "restarted" : "back"),
               ", redoing the ", what_ran.substr(0, what_ran.find(' ')), " (retry ", retry, "/", options_.step_retries,
               ")");
    on_recovered();
  }
}

}  // namespace baton
