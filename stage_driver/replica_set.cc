#include "stage_driver/replica_set.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <atomic>
#include <chrono>

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

ReplicaSet::ReplicaSet(const JobConfig& job, const StageDriverOptions& options,
                       const std::vector<std::vector<StageSpec>>& plan, ReplicaFleetConfig config,
                       std::function<bool()> stop, StepExecutor::OnRecovery on_recovery)
    : options_(options), config_(std::move(config)), speeds_(options.replicas) {
  const int stages = options.stages;
  for (int r = 0; r < options.replicas; ++r) {
    auto replica = std::make_unique<Replica>();
    StageFleet& fleet = replica->fleet;
    fleet.job_id = config_.job_id;
    fleet.loss_scale = config_.loss_scale;
    fleet.dropout_seed = config_.dropout_seed;
    fleet.stall_timeout = config_.stall_timeout;
    replica->stages = std::make_unique<StageSet>(job, options, plan, &fleet, stop, r);
    StepExecutor::OnRecovery hook;
    if (on_recovery) {
      hook = [on_recovery, r, stages](int64_t step, int stage, const std::string& cause) {
        on_recovery(step, stage < 0 ? stage : r * stages + stage, cause);
      };
    }
    replica->executor = std::make_unique<StepExecutor>(options, &fleet, replica->stages.get(), stop, hook);
    replicas_.push_back(std::move(replica));
  }
}

ReplicaSet::~ReplicaSet() = default;

StageFleet& ReplicaSet::fleet(int r) { return replicas_[r]->fleet; }
StepExecutor& ReplicaSet::executor(int r) { return *replicas_[r]->executor; }

absl::Status ReplicaSet::Start() {
  // Every slice size a split can give, so that Run only looks schedules up (interleaved: multiples of the stages).
  const int unit = config_.schedule_kind == ScheduleKind::kInterleaved1F1B ? options_.stages : 1;
  for (int m = unit; m <= config_.micro_batches; m += unit) {
    ASSIGN_OR_RETURN(schedules_[m], MakeSchedule(config_.schedule_kind, options_.stages, m, config_.chunks));
  }
  // Until the first step sets each replica's share: forward-only passes read only the chunks from it.
  for (auto& replica : replicas_) replica->fleet.schedule = schedules_.begin()->second;
  RETURN_IF_ERROR(ParallelFor(size(), [&](int r) { return replicas_[r]->stages->Start(); }));
  return PublishTargets();
}

// With replicas, one prometheus_targets.json names every replica's local workers (a lone StageSet writes its own).
absl::Status ReplicaSet::PublishTargets() const {
  if (size() == 1 || options_.metrics_address.empty()) return absl::OkStatus();
  std::vector<std::string> targets;
  for (const auto& replica : replicas_) {
    if (replica->stages->local() == nullptr) continue;  // remote workers' metrics are their operators' to list
    for (const std::string& t : replica->stages->local()->metrics_addresses()) targets.push_back(t);
  }
  return PublishMetricsTargets(options_.output_dir, options_.metrics_address, targets, !options_.quiet);
}

std::vector<std::string> ReplicaSet::addresses() const {
  std::vector<std::string> all;
  for (const auto& replica : replicas_) {
    for (const std::string& a : replica->stages->addresses()) all.push_back(a);
  }
  return all;
}

std::vector<int> ReplicaSet::SplitFor(int64_t step) {
  auto it = splits_.find(step);
  if (it != splits_.end()) return it->second;
  while (!splits_.empty() && splits_.begin()->first < step - 1) splits_.erase(splits_.begin());
  while (!pushed_.empty() && pushed_.begin()->first < step - 1) pushed_.erase(pushed_.begin());
  const int unit = config_.schedule_kind == ScheduleKind::kInterleaved1F1B ? options_.stages : 1;
  const int units = config_.micro_batches / unit;
  std::vector<int> split =
      config_.split_by_speed ? SplitBySpeed(units, speeds_.seconds_per_micro_batch()) : SplitEvenly(units, size());
  for (int& m : split) m *= unit;
  splits_[step] = split;
  return split;
}

absl::Status ReplicaSet::PushData(int64_t step, const StepInputs& inputs) {
  std::vector<int> split;
  {
    absl::MutexLock lock(&mu_);
    split = SplitFor(step);
  }
  const std::vector<int> first = FirstMicroBatches(split);
  return ParallelFor(size(), [&](int r) -> absl::Status {
    if (split[r] == 0) return absl::OkStatus();
    {
      absl::MutexLock lock(&mu_);
      if (pushed_[step].count(r)) return absl::OkStatus();
    }
    RETURN_IF_ERROR(replicas_[r]->fleet.PushData(step, SliceStepInputs(inputs, first[r], split[r])));
    absl::MutexLock lock(&mu_);
    pushed_[step].insert(r);
    return absl::OkStatus();
  });
}

absl::Status ReplicaSet::RunReplica(int r, int64_t step, const StepInputs& inputs, const std::vector<int>& split,
                                    const std::map<std::string, at::Tensor>& master,
                                    const std::function<void()>& on_started, const std::function<void()>& on_abort,
                                    StepOutputs* out) {
  const int first = FirstMicroBatches(split)[r];
  Replica& replica = *replicas_[r];
  replica.fleet.schedule = schedules_.at(split[r]);
  replica.fleet.first_micro_batch = first;
  StepInputs slice = SliceStepInputs(inputs, first, split[r]);
  {
    absl::MutexLock lock(&mu_);
    slice.data_pushed = pushed_[step].count(r) > 0;
  }
  // A failed attempt: the caller's on_abort (it settles the next step's early push), then this replica's early push
  // of the next step is void (its recovery empties the stages' inboxes).
  auto abort = [&] {
    {
      absl::MutexLock lock(&abort_mu_);
      if (on_abort) on_abort();
    }
    absl::MutexLock lock(&mu_);
    pushed_[step + 1].erase(r);
  };
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(*out, replica.executor->Run(step, slice, master, on_started, abort));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  absl::MutexLock lock(&mu_);
  speeds_.Record(r, split[r], seconds);
  return absl::OkStatus();
}

absl::StatusOr<StepOutputs> ReplicaSet::Run(int64_t step, const StepInputs& inputs,
                                            const std::map<std::string, at::Tensor>& master,
                                            const std::function<void()>& on_started,
                                            const std::function<void()>& on_abort) {
  std::vector<int> split;
  {
    absl::MutexLock lock(&mu_);
    split = SplitFor(step);
  }
  int running = 0;
  for (int m : split) running += m > 0 ? 1 : 0;
  // The caller's on_started once every running replica has its work.
  std::atomic<int> started{0};
  auto started_one = [&] {
    if (started.fetch_add(1) + 1 == running && on_started) on_started();
  };
  std::vector<StepOutputs> outputs(size());
  RETURN_IF_ERROR(ParallelFor(size(), [&](int r) -> absl::Status {
    if (split[r] == 0) return absl::OkStatus();
    return RunReplica(r, step, inputs, split, master, started_one, on_abort, &outputs[r]);
  }));
  std::vector<StepOutputs> ran;
  for (int r = 0; r < size(); ++r) {
    if (split[r] > 0) ran.push_back(std::move(outputs[r]));
  }
  ASSIGN_OR_RETURN(StepOutputs merged, MergeReplicaOutputs(std::move(ran)));
  merged.replica_micro_batches = split;
  return merged;
}

double ReplicaSet::OldestPushSeconds() const {
  double oldest = 0;
  for (const auto& replica : replicas_) {
    for (const auto& client : replica->fleet.clients) oldest = std::max(oldest, client->OldestPushSeconds());
  }
  return oldest;
}

void ReplicaSet::CancelAll() {
  for (auto& replica : replicas_) {
    for (auto& client : replica->fleet.clients) client->Cancel();
  }
}

absl::Status ReplicaSet::Stop() {
  absl::Status first = absl::OkStatus();
  for (auto& replica : replicas_) first.Update(replica->stages->Stop());
  return first;
}

}  // namespace baton
