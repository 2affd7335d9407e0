#include "coordinator/replica_set.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "core/util/log.h"
#include "core/util/status.h"
#include "stage_driver/stage_metrics.h"

namespace baton {

StepInputs SliceStepInputs(const StepInputs& inputs, int first, int count) {
  StepInputs slice;
  slice.micro_batches.assign(inputs.micro_batches.begin() + first, inputs.micro_batches.begin() + first + count);
  slice.shell.assign(inputs.shell.begin() + first, inputs.shell.begin() + first + count);
  return slice;
}

absl::StatusOr<StepOutputs> MergeReplicaOutputs(std::vector<StepOutputs> outputs) {
  if (outputs.empty()) return absl::InternalError("no replica ran a micro-batch");
  StepOutputs merged = std::move(outputs.front());
  std::map<std::string, at::Tensor*> by_name;
  for (TensorMap& grads : merged.grads) {
    for (auto& [name, g] : grads) by_name[name] = &g;
  }
  google::protobuf::RepeatedField<float>* losses = merged.summaries.back().mutable_losses();
  for (size_t r = 1; r < outputs.size(); ++r) {
    for (const TensorMap& grads : outputs[r].grads) {
      for (const auto& [name, g] : grads) {
        auto it = by_name.find(name);
        if (it == by_name.end()) {
          return absl::DataLossError(absl::StrCat("a replica sent a gradient for ", name, " that the first has not"));
        }
        it->second->add_(g);
      }
    }
    losses->Add(outputs[r].summaries.back().losses().begin(), outputs[r].summaries.back().losses().end());
  }
  return merged;
}

ReplicaSet::ReplicaSet(const PipelineSpec& pipeline, const StageDriverOptions& options,
                       const std::vector<std::vector<std::vector<StageSpec>>>& plans, ReplicaConfig config,
                       std::function<bool()> stop, StagePipeline::OnRecovery on_recovery)
    : options_(options),
      config_(std::move(config)),
      recoveries_(options.replicas),
      state_(options.replicas, State::kReady),
      recovery_errors_(options.replicas),
      speeds_(options.replicas) {
  // A recovery under way when the run ends (a remote worker that has not come back) stops waiting for it (Stop).
  auto stop_waiting = [this, stop = std::move(stop)] { return stopping_.load() || (stop && stop()); };
  FleetSettings settings;
  settings.loss_scale = config_.loss_scale;
  settings.dropout_seed = config_.dropout_seed;
  settings.stall_timeout = config_.stall_timeout;
  settings.own_adapters = config_.local_optimizer;
  settings.chunks = config_.chunks;
  settings.on_outage = config_.on_outage;
  for (int r = 0; r < options.replicas; ++r) {
    // A replica lost (whoever recovers it: its own pipeline in a pass or a one-replica step, or TakeOut): the sums it
    // held are gone, and the trainer hears of it by the global worker index.
    StagePipeline::OnRecovery hook = [this, r, on_recovery, first = options.FirstWorker(r)](int64_t step, int stage,
                                                                                            const std::string& cause) {
      ForgetHeld(r);
      if (on_recovery) on_recovery(step, stage < 0 ? stage : first + stage, cause);
    };
    pipelines_.push_back(
        std::make_unique<StagePipeline>(pipeline, options, plans[r], settings, stop_waiting, std::move(hook), r));
  }
}

ReplicaSet::~ReplicaSet() {
  stopping_ = true;
  JoinRecoveries();
}

void ReplicaSet::SettleReplica(int r) {
  if (recoveries_[r].joinable()) recoveries_[r].join();
}

void ReplicaSet::JoinRecoveries() {
  for (int r = 0; r < size(); ++r) SettleReplica(r);
}

void ReplicaSet::ForgetHeld(int r) {
  absl::MutexLock lock(&mu_);
  for (auto& [step, replicas] : held_) replicas.erase(r);
}

int ReplicaSet::Unit() const { return config_.schedule_kind == ScheduleKind::kInterleaved1F1B ? options_.stages : 1; }

std::vector<int> ReplicaSet::ReadyReplicas() const {
  std::vector<int> ready;
  for (int r = 0; r < size(); ++r) {
    if (state_[r] == State::kReady) ready.push_back(r);
  }
  return ready;
}

StagePipeline& ReplicaSet::pipeline(int r) { return *pipelines_[r]; }

absl::Status ReplicaSet::Start() {
  // Every slice size a split can give, so that Run only looks schedules up (interleaved: multiples of the stages).
  const int unit = Unit();
  for (int r = 0; r < size(); ++r) {
    const int stages = options_.StagesOf(r);
    for (int m = unit; m <= config_.micro_batches; m += unit) {
      if (schedules_.count({stages, m})) continue;
      ASSIGN_OR_RETURN(schedules_[std::make_pair(stages, m)],
                       MakeSchedule(config_.schedule_kind, stages, m, config_.chunks));
    }
  }
  RETURN_IF_ERROR(ParallelFor(size(), [&](int r) { return pipelines_[r]->Start(); }));
  return PublishTargets();
}

// With replicas, one prometheus_targets.json names every replica's local workers (a lone StageSet writes its own).
absl::Status ReplicaSet::PublishTargets() const {
  if (size() == 1 || options_.metrics_address.empty()) return absl::OkStatus();
  std::vector<std::string> targets;
  for (const auto& pipeline : pipelines_) {
    if (pipeline->local() == nullptr) continue;  // remote workers' metrics are their operators' to list
    for (const std::string& t : pipeline->local()->metrics_addresses()) targets.push_back(t);
  }
  return PublishMetricsTargets(options_.output_dir, options_.process, options_.metrics_address, targets,
                               !options_.quiet);
}

std::vector<std::string> ReplicaSet::addresses() const {
  std::vector<std::string> all;
  for (const auto& pipeline : pipelines_) {
    for (const std::string& a : pipeline->addresses()) all.push_back(a);
  }
  return all;
}

std::vector<int> ReplicaSet::SplitFor(int64_t step) {
  auto it = splits_.find(step);
  if (it != splits_.end()) {
    bool still_ready = true;
    for (int r = 0; r < size(); ++r) still_ready &= it->second[r] == 0 || state_[r] == State::kReady;
    if (still_ready) return it->second;
  }
  while (!splits_.empty() && splits_.begin()->first < step - 1) splits_.erase(splits_.begin());
  while (!held_.empty() && held_.begin()->first < step - 1) held_.erase(held_.begin());
  const int unit = Unit();
  const int units = config_.micro_batches / unit;
  // Never empty after a completed step (the replicas that ran it are ready); replica 0 otherwise.
  std::vector<int> ready = ReadyReplicas();
  if (ready.empty()) ready = {0};
  std::vector<double> speeds;
  for (int r : ready) speeds.push_back(speeds_.seconds_per_micro_batch()[r]);
  const std::vector<int> dealt =
      config_.split_by_speed ? SplitBySpeed(units, speeds) : SplitEvenly(units, static_cast<int>(ready.size()));
  std::vector<int> split(size(), 0);
  for (size_t k = 0; k < ready.size(); ++k) split[ready[k]] = dealt[k] * unit;
  splits_[step] = split;
  return split;
}

absl::Status ReplicaSet::Prefetch(int64_t step, const StepInputs& inputs) {
  std::vector<int> split;
  {
    absl::MutexLock lock(&mu_);
    split = SplitFor(step);
  }
  const std::vector<int> first = FirstMicroBatches(split);
  return ParallelFor(size(), [&](int r) -> absl::Status {
    if (split[r] == 0) return absl::OkStatus();
    return pipelines_[r]->Prefetch(step, first[r], SliceStepInputs(inputs, first[r], split[r]));
  });
}

absl::StatusOr<StepOutputs> ReplicaSet::RunOne(int64_t step, const StepInputs& inputs,
                                               const std::map<std::string, at::Tensor>& master, SliceGuard* guard) {
  StepSlice slice;
  slice.schedule = schedules_.at({options_.StagesOf(0), config_.micro_batches});
  // A stage-local optimizer: the stages hold the step's gradients for their own optimizer.
  if (config_.local_optimizer) slice.gradients = v1::StepPlan::HOLD_NEW;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(StepOutputs out, pipelines_[0]->RunStep(step, slice, inputs, master, guard));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.replica_micro_batches = {config_.micro_batches};
  out.replica_seconds = {seconds};
  absl::MutexLock lock(&mu_);
  speeds_.Record(0, config_.micro_batches, seconds);
  return out;
}

std::vector<absl::StatusOr<StepOutputs>> ReplicaSet::RunSlices(int64_t step, const StepInputs& inputs,
                                                               const std::vector<Slice>& slices,
                                                               const std::map<std::string, at::Tensor>& master,
                                                               SliceGuard* guard, bool reduce_when_held) {
  std::vector<absl::StatusOr<StepOutputs>> results(slices.size(), absl::UnknownError("not run"));
  (void)ParallelFor(static_cast<int>(slices.size()), [&](int k) {
    const Slice& slice = slices[k];
    StagePipeline& pipeline = *pipelines_[slice.replica];
    StepSlice run;
    run.schedule = schedules_.at({options_.StagesOf(slice.replica), slice.count});
    run.first_micro_batch = slice.first;
    const StepInputs part = SliceStepInputs(inputs, slice.first, slice.count);
    bool adds = false;
    {
      absl::MutexLock lock(&mu_);
      adds = held_[step].count(slice.replica) > 0;
    }
    if (config_.local_optimizer) run.gradients = adds ? v1::StepPlan::HOLD_ADD : v1::StepPlan::HOLD_NEW;
    run.reduce_when_held = reduce_when_held && !adds;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status prepared = guard != nullptr && !adds ? guard->BeforeSlice(slice.replica) : absl::OkStatus();
    if (!prepared.ok()) {
      results[k] = prepared;
      return absl::OkStatus();
    }
    results[k] = pipeline.TryStep(step, run, part, master);
    if (results[k].ok()) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      results[k]->replica_seconds = {s};
      absl::MutexLock lock(&mu_);
      speeds_.Record(slice.replica, slice.count, s);
      if (config_.local_optimizer) held_[step].insert(slice.replica);
    }
    return absl::OkStatus();
  });
  return results;
}

absl::Status ReplicaSet::TakeOut(int r, int64_t step, const absl::Status& failure) {
  StagePipeline& pipeline = *pipelines_[r];
  const StepLoss loss = pipeline.Diagnose(failure);
  if (!loss.retryable) return failure;
  pipeline.ReportLoss(step + 1, loss);  // its early push forgotten, it counts as lost, the trainer told
  const bool local = pipeline.local() != nullptr;
  if (size() == 1) {  // nowhere else to go: the step is redone once the replica is back
    LogWarning("step ", step + 1, ": ", loss.what, "; the step runs again once ",
               local ? "its worker is restarted" : "its worker is back");
  } else {
    LogWarning("step ", step + 1, ": replica ", r, ": ", loss.what,
               "; its micro-batches go to the other replicas while it ", local ? "is restarted" : "is waited for");
  }
  {
    absl::MutexLock lock(&mu_);
    state_[r] = State::kRecovering;
  }
  SettleReplica(r);  // an earlier recovery of it, long finished
  // The pipeline's recovery (StagePipeline::Recover, as a one-replica run's), in the background.
  recoveries_[r] = std::thread(
      [this, r, loss, what = absl::StrCat("replica ", r, " (step ", step + 1, ")"), hook_step = step + 1, &pipeline] {
        int retry = 1;
        absl::StatusOr<std::vector<int>> lost = pipeline.Recover(hook_step, what, loss, &retry);
        absl::MutexLock lock(&mu_);
        state_[r] = lost.ok() ? State::kReady : State::kFailed;
        if (!lost.ok()) recovery_errors_[r] = std::string(lost.status().message());
        if (lost.ok()) {
          LogWarning("replica ", r, " is back; it rejoins at the next step");
        } else if (!stopping_) {  // else the run ended without it (Stop said so)
          LogWarning("replica ", r, " did not come back: ", lost.status().message());
        }
      });
  return absl::OkStatus();
}

absl::StatusOr<std::set<int>> ReplicaSet::Reconfigure(const std::set<int>& replicas, int64_t step) {
  const std::vector<int> list(replicas.begin(), replicas.end());
  std::vector<absl::Status> results(list.size());
  (void)ParallelFor(static_cast<int>(list.size()), [&](int k) {
    results[k] = pipelines_[list[k]]->Reconfigure();  // a new generation: the inboxes and early pushes are gone
    return absl::OkStatus();
  });
  std::set<int> gone;  // lost since their last attempt (a worker killed after it finished its slice)
  for (size_t k = 0; k < list.size(); ++k) {
    if (results[k].ok()) continue;
    RETURN_IF_ERROR(TakeOut(list[k], step, results[k]));
    gone.insert(list[k]);
  }
  return gone;
}

void ReplicaSet::MoveSlicesOf(const std::set<int>& replicas, std::vector<Slice>& from, std::vector<Slice>& to) {
  auto moved = std::stable_partition(from.begin(), from.end(),
                                     [&](const Slice& slice) { return replicas.count(slice.replica) == 0; });
  to.insert(to.end(), moved, from.end());
  from.erase(moved, from.end());
}

absl::StatusOr<std::vector<int>> ReplicaSet::ReconfigureReady(int64_t step, std::vector<Slice>& todo,
                                                              std::vector<Slice>& lost) {
  for (int attempt = 0;; ++attempt) {
    std::vector<int> ready;
    {
      absl::MutexLock lock(&mu_);
      ready = ReadyReplicas();
    }
    if (ready.empty()) {  // nobody left: wait for the recoveries
      JoinRecoveries();
      absl::MutexLock lock(&mu_);
      ready = ReadyReplicas();
      if (ready.empty()) {
        return absl::UnavailableError(
            absl::StrCat("step ", step + 1, ": every replica was lost and none came back (", recovery_errors_[0], ")"));
      }
    }
    ASSIGN_OR_RETURN(std::set<int> gone, Reconfigure(std::set<int>(ready.begin(), ready.end()), step));
    MoveSlicesOf(gone, todo, lost);
    ready.erase(std::remove_if(ready.begin(), ready.end(), [&](int r) { return gone.count(r) > 0; }), ready.end());
    if (!ready.empty()) return ready;
    if (attempt >= size() + options_.step_retries) {
      return absl::UnavailableError(absl::StrCat("step ", step + 1, ": no replica could be reconfigured"));
    }
  }
}

absl::Status ReplicaSet::Reassign(int64_t step, std::vector<Slice> lost, std::vector<Slice>& todo) {
  ASSIGN_OR_RETURN(std::vector<int> ready, ReconfigureReady(step, todo, lost));
  std::vector<double> speeds;
  {
    absl::MutexLock lock(&mu_);
    for (int r : ready) speeds.push_back(speeds_.seconds_per_micro_batch()[r]);
  }
  const int unit = Unit();
  for (const Slice& slice : lost) {
    const std::vector<int> dealt = SplitBySpeed(slice.count / unit, speeds);
    int first = slice.first;
    for (size_t k = 0; k < ready.size(); ++k) {
      if (dealt[k] == 0) continue;
      todo.push_back({ready[k], first, dealt[k] * unit});
      first += dealt[k] * unit;
    }
  }
  return absl::OkStatus();
}

std::vector<int> ReplicaSet::StepReplicas(int64_t step) {
  std::vector<int> split;
  {
    absl::MutexLock lock(&mu_);
    split = SplitFor(step);
  }
  std::vector<int> with;
  for (int r = 0; r < size(); ++r) {
    if (split[r] > 0) with.push_back(r);
  }
  return with;
}

absl::StatusOr<StepOutputs> ReplicaSet::Run(int64_t step, const StepInputs& inputs,
                                            const std::map<std::string, at::Tensor>& master, SliceGuard* guard,
                                            bool reduce_when_held) {
  if (size() == 1) return RunOne(step, inputs, master, guard);
  std::vector<int> split;
  {
    absl::MutexLock lock(&mu_);
    split = SplitFor(step);
  }
  std::vector<Slice> todo;
  const std::vector<int> first = FirstMicroBatches(split);
  for (int r = 0; r < size(); ++r) {
    if (split[r] > 0) todo.push_back({r, first[r], split[r]});
  }
  DoneSlices done;
  int failures = 0;
  for (int round = 0; !todo.empty(); ++round) {
    // At most one slice per replica at a time (a pipeline runs one step); a replica given more runs them in turn.
    std::vector<Slice> now, later;
    std::set<int> busy;
    for (const Slice& slice : todo) (busy.insert(slice.replica).second ? now : later).push_back(slice);
    std::vector<absl::StatusOr<StepOutputs>> results =
        RunSlices(step, inputs, now, master, guard, reduce_when_held && round == 0);
    std::vector<Slice> lost;
    for (size_t k = 0; k < now.size(); ++k) {
      if (results[k].ok()) {
        done[now[k].first] = {now[k].replica, Losses(now[k].replica), std::move(*results[k])};
        continue;
      }
      lost.push_back(now[k]);
      RETURN_IF_ERROR(TakeOut(now[k].replica, step, results[k].status()));
    }
    todo = later;
    if (lost.empty() && !todo.empty()) {  // they ran this step already
      ASSIGN_OR_RETURN(std::set<int> gone, Reconfigure(busy, step));
      MoveSlicesOf(gone, todo, lost);
    }
    for (const Slice& slice : LostWithTheirReplica(done)) lost.push_back(slice);
    if (!lost.empty()) {
      if (++failures > options_.step_retries + size()) {
        return absl::UnavailableError(
            absl::StrCat("step ", step + 1, ": replicas kept failing (", failures, " losses in this step); giving up"));
      }
      RETURN_IF_ERROR(Reassign(step, std::move(lost), todo));  // reconfigures every ready replica
    }
  }
  std::vector<StepOutputs> in_order;
  std::vector<int> ran(size(), 0);
  std::vector<double> seconds(size(), 0.0);
  for (auto& [first_mb, slice] : done) {
    ran[slice.replica] += static_cast<int>(slice.outputs.summaries.back().losses_size());
    seconds[slice.replica] += slice.outputs.replica_seconds.front();
    in_order.push_back(std::move(slice.outputs));
  }
  ASSIGN_OR_RETURN(StepOutputs merged, MergeReplicaOutputs(std::move(in_order)));
  merged.replica_micro_batches = ran;
  merged.replica_seconds = seconds;
  return merged;
}

std::vector<ReplicaSet::Slice> ReplicaSet::LostWithTheirReplica(DoneSlices& done) {
  std::vector<Slice> lost;
  if (!config_.local_optimizer) return lost;
  absl::MutexLock lock(&mu_);
  for (auto it = done.begin(); it != done.end();) {
    const DoneSlice& slice = it->second;
    if (pipelines_[slice.replica]->Losses() == slice.losses) {
      ++it;
      continue;
    }
    lost.push_back({slice.replica, it->first, static_cast<int>(slice.outputs.summaries.back().losses_size())});
    it = done.erase(it);
  }
  return lost;
}

int ReplicaSet::Losses(int r) const { return pipelines_[r]->Losses(); }

bool ReplicaSet::Ready(int r) const {
  absl::MutexLock lock(&mu_);
  return state_[r] == State::kReady;
}

absl::Status ReplicaSet::RestartStep(int64_t step) {
  std::vector<Slice> none, lost;
  ASSIGN_OR_RETURN(std::vector<int> ready, ReconfigureReady(step, none, lost));
  absl::MutexLock lock(&mu_);
  held_.erase(step);
  splits_.erase(step);
  if (size() == 1) {
    LogWarning("step ", step + 1, ": starting over");
  } else {
    LogWarning("step ", step + 1, ": starting over on ", ready.size(), " of ", size(), " replicas");
  }
  return absl::OkStatus();
}

void ReplicaSet::Rewind() {
  absl::MutexLock lock(&mu_);
  splits_.clear();
  held_.clear();
}

TrafficBytes ReplicaSet::Traffic() const {
  TrafficBytes total;
  for (const auto& pipeline : pipelines_) total += pipeline->Traffic();
  return total;
}

// A recovering replica's clients are its recovery's (it replaces them): skipped.
double ReplicaSet::OldestPushSeconds() const {
  absl::MutexLock lock(&mu_);
  double oldest = 0;
  for (int r = 0; r < size(); ++r) {
    if (state_[r] != State::kReady) continue;
    oldest = std::max(oldest, pipelines_[r]->OldestPushSeconds());
  }
  return oldest;
}

void ReplicaSet::CancelAll() {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < size(); ++r) {
    if (state_[r] != State::kReady) continue;
    pipelines_[r]->CancelAll();
  }
}

absl::Status ReplicaSet::Stop() {
  {
    absl::MutexLock lock(&mu_);
    for (int r = 0; r < size(); ++r) {
      if (state_[r] == State::kRecovering) LogWarning("replica ", r, " is still out; the run ends without it");
    }
  }
  stopping_ = true;  // a recovery still waiting for its worker gives up within 200 ms
  JoinRecoveries();
  absl::Status first = absl::OkStatus();
  for (auto& pipeline : pipelines_) first.Update(pipeline->Stop());
  return first;
}

}  // namespace baton
