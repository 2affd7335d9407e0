#include "stage_driver/stage_pipeline.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <chrono>
#include <thread>

#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

FleetSettings WithId(FleetSettings settings, const std::string& id) {
  settings.job_id = id;
  return settings;
}

}  // namespace

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

StagePipeline::StagePipeline(PipelineSpec spec, const StageDriverOptions& options,
                             std::vector<std::vector<StageSpec>> plan, FleetSettings settings,
                             std::function<bool()> stop, OnRecovery on_recovery, int replica)
    : options_(options),
      stop_(std::move(stop)),
      on_recovery_(std::move(on_recovery)),
      fleet_(WithId(std::move(settings), spec.id), options.FirstWorker(replica),
             options.replicas > 1 ? absl::StrCat("replica ", replica, ": ") : "") {
  stages_ = std::make_unique<StageSet>(std::move(spec), options, std::move(plan), &fleet_, stop_, replica);
}

StagePipeline::~StagePipeline() = default;

absl::Status StagePipeline::Start() { return stages_->Start(); }

absl::Status StagePipeline::Stop() {
  Unsettle();  // no early push outlives the clients
  return stages_->Stop();
}

bool StagePipeline::Prefetched(int64_t step, const StepSlice& slice, int count) const {
  absl::MutexLock lock(&mu_);
  return pushed_.step == step && pushed_.first == slice.first_micro_batch && pushed_.count == count &&
         pushed_.generation == fleet_.generation();
}

absl::StatusOr<StepOutputs> StagePipeline::TryStep(int64_t step, const StepSlice& slice, const StepInputs& inputs,
                                                   const std::map<std::string, at::Tensor>& master) {
  const bool pushed = Prefetched(step, slice, static_cast<int>(inputs.shell.size()));
  return fleet_.RunStep(step, slice, inputs, master, /*feed_data=*/!pushed);
}

absl::StatusOr<StepOutputs> StagePipeline::RunStep(int64_t step, const StepSlice& slice, const StepInputs& inputs,
                                                   const std::map<std::string, at::Tensor>& master, SliceGuard* guard) {
  return WithRecovery<StepOutputs>(step + 1, absl::StrCat("step ", step + 1), [&](int) -> absl::StatusOr<StepOutputs> {
    if (guard != nullptr) RETURN_IF_ERROR(guard->BeforeSlice(replica()));
    return TryStep(step, slice, inputs, master);
  });
}

absl::StatusOr<std::vector<at::Tensor>> StagePipeline::RunForwardPass(int64_t step, uint64_t pass,
                                                                      const std::vector<ShellOutputs>& shell,
                                                                      const std::map<std::string, at::Tensor>& master) {
  return WithRecovery<std::vector<at::Tensor>>(step, absl::StrCat("pass ", pass, " (after step ", step, ")"),
                                               [&](int) { return fleet_.RunForwardPass(step, pass, shell, master); });
}

absl::Status StagePipeline::RunBetweenSteps(int64_t step, const std::string& what_ran,
                                            const std::function<absl::Status()>& work) {
  return WithRecovery<bool>(step, what_ran,
                            [&](int) -> absl::StatusOr<bool> {
                              RETURN_IF_ERROR(work());
                              return true;
                            })
      .status();
}

absl::Status StagePipeline::Prefetch(int64_t step, int first, const StepInputs& inputs) {
  {
    absl::MutexLock lock(&mu_);
    if (settling_) return absl::OkStatus();  // the step feeds its data once the stages are back
    ++pushing_;
  }
  const uint64_t generation = fleet_.generation();  // not raised while a push is in flight (Unsettle waits for it)
  absl::Status pushed = fleet_.PushData(step, inputs);
  absl::MutexLock lock(&mu_);
  --pushing_;
  if (pushed.ok() && !settling_) pushed_ = {step, first, static_cast<int>(inputs.shell.size()), generation};
  return pushed;
}

void StagePipeline::Unsettle() {
  absl::MutexLock lock(&mu_);
  settling_ = true;
  auto quiet = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pushing_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&quiet), absl::Seconds(1))) {
    fleet_.CancelAll();  // a push that hangs on a lost stage; the recovery connects afresh
    mu_.Await(absl::Condition(&quiet));
  }
  pushed_ = Pushed();
}

void StagePipeline::Settled() {
  absl::MutexLock lock(&mu_);
  settling_ = false;
}

absl::StatusOr<std::map<std::string, at::Tensor>> StagePipeline::Adapters(bool optimizer_state) {
  std::vector<TensorMap> parts(size());
  auto read = [&](StageClient& client, int stage) -> absl::Status {
    ASSIGN_OR_RETURN(parts[stage], client.GetLora(id(), optimizer_state));
    return absl::OkStatus();
  };
  const std::string doing =
      optimizer_state ? "the read-back of the run's state waits for it" : "the read of its adapters waits for it";
  for (const absl::Status& s : CallEach(doing, read)) {
    RETURN_IF_ERROR(s);
  }
  std::map<std::string, at::Tensor> adapters;
  for (TensorMap& part : parts) adapters.merge(part);
  return adapters;
}

std::vector<absl::Status> StagePipeline::CallEach(const std::string& doing,
                                                  const std::function<absl::Status(StageClient&, int)>& call) {
  return fleet_.CallEach(doing, call);
}

StepLoss StagePipeline::Diagnose(const absl::Status& failure) const {
  const int p = fleet_.size();
  LocalWorkers* const local = stages_->local();
  // Who is gone: dead local processes (how they died is the best cause), else the stage a stall was blamed on.
  // A killed worker's connections break while it is still exiting: give it a moment to be reaped.
  auto any_dead = [&] {
    for (int i = 0; local != nullptr && i < p; ++i) {
      if (!local->Alive(i)) return true;
    }
    return false;
  };
  for (int i = 0; i < 25 && local != nullptr && fleet_.last_stall().stage < 0 && !any_dead(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<int> dead;
  std::string cause;
  for (int i = 0; local != nullptr && i < p; ++i) {
    if (!local->Alive(i)) {
      dead.push_back(i);
      absl::StrAppend(&cause, cause.empty() ? "" : "; ", fleet_.name(i), ": ", stages_->Describe(i));
    }
  }
  StepLoss loss;
  loss.suspect = dead.empty() ? fleet_.last_stall().stage : dead.front();
  if (dead.size() == 1) cause = stages_->Describe(dead.front());  // the line names the stage already
  if (cause.empty() && !fleet_.last_stall().message.empty()) cause = fleet_.last_stall().message;
  if (cause.empty()) cause = std::string(failure.message());
  loss.cause = cause;
  loss.retryable = !stop_() && RetryableStepFailure(failure, !dead.empty());
  // "stage 1 (host:port) lost: killed by signal 9 (Killed)"; a stall's or an error's message names its stage.
  loss.what = dead.size() == 1 ? absl::StrCat(fleet_.name(dead.front()), " lost: ", cause) : cause;
  return loss;
}

void StagePipeline::ReportLoss(int64_t step, const StepLoss& loss) {
  Unsettle();  // the recovery empties the stages' inboxes: what was pushed early is gone
  {
    absl::MutexLock lock(&mu_);
    ++losses_;
  }
  if (on_recovery_) on_recovery_(step, loss.suspect, loss.cause);
}

absl::StatusOr<std::vector<int>> StagePipeline::Recover(int64_t step, const std::string& what_ran, const StepLoss& loss,
                                                        int* retry) {
  Unsettle();
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
  Settled();
  if (!lost.ok()) {
    return absl::Status(lost.status().code(), absl::StrCat(what_ran, ": ", loss.what, "; ", lost.status().message()));
  }
  return lost;
}

absl::Status StagePipeline::Reconfigure() {
  Unsettle();
  fleet_.NewGeneration();
  absl::Status configured = stages_->Configure();
  Settled();
  return configured;
}

int StagePipeline::Losses() const {
  absl::MutexLock lock(&mu_);
  return losses_;
}

TrafficBytes StagePipeline::Traffic() const { return fleet_.Traffic(); }

double StagePipeline::OldestPushSeconds() const {
  absl::MutexLock lock(&mu_);  // the clients stand while no recovery is under way
  return settling_ ? 0.0 : fleet_.OldestPushSeconds();
}

void StagePipeline::CancelAll() {
  absl::MutexLock lock(&mu_);
  if (!settling_) fleet_.CancelAll();
}

template <typename Out>
absl::StatusOr<Out> StagePipeline::WithRecovery(int64_t hook_step, const std::string& what_ran,
                                                const std::function<absl::StatusOr<Out>(int retry)>& attempt) {
  for (int retry = 1;; ++retry) {
    auto out = attempt(retry);
    if (out.ok()) return out;
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
  }
}

}  // namespace baton
