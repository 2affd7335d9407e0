#include "stage_driver/testing/fake_optimizer.h"

#include <absl/strings/str_cat.h>

#include <map>

#include "core/train/optimizer.h"

namespace baton {
namespace {

// `into` += `add`, by name (a name `into` lacks starts as a copy).
void AddInto(TensorMap& into, const TensorMap& add) {
  for (const auto& [name, g] : add) {
    auto it = into.find(name);
    if (it == into.end()) {
      into[name] = g.clone();
    } else {
      it->second = it->second + g;
    }
  }
}

}  // namespace

// The members of one peer group, by rank, and what each put in for a step's sum.
class FakeGroup {
 public:
  explicit FakeGroup(int size) : size_(size) {}

  // Every fake worker of the process that joins `prefix` gets the same group.
  static std::shared_ptr<FakeGroup> Named(const std::string& prefix, int size) {
    static absl::Mutex registry_mu(absl::kConstInit);
    static auto* registry = new std::map<std::string, std::shared_ptr<FakeGroup>>();
    absl::MutexLock lock(&registry_mu);
    std::shared_ptr<FakeGroup>& group = (*registry)[prefix];
    if (!group) group = std::make_shared<FakeGroup>(size);
    return group;
  }

  absl::Status Join(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++joined_;
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return joined_ >= size_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("the group of ", size_, " did not form"));
    }
    return absl::OkStatus();
  }

  // Rank `rank`'s part of step `step`'s sum; the sum over every rank, in rank order.
  absl::StatusOr<TensorMap> Sum(int64_t step, int rank, const TensorMap& part) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    parts_[step][rank] = part;
    auto settled = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return broken_ || static_cast<int>(parts_[step].size()) >= size_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&settled), absl::Seconds(10))) {
      return absl::DeadlineExceededError("a peer never joined the sum");
    }
    if (broken_) return absl::AbortedError("a peer left the group during the sum");
    TensorMap sum;
    for (const auto& [r, grads] : parts_[step]) AddInto(sum, grads);
    return sum;
  }

  void Break() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }

 private:
  const int size_;
  absl::Mutex mu_;
  int joined_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::map<int, TensorMap>> parts_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

void FakeLocalOptimizer::Load(const TensorMap& state) {
  absl::MutexLock lock(&mu_);
  for (const std::string& name : names_) {
    auto it = state.find(name);
    if (it != state.end()) adapters_[name] = it->second.clone();
  }
  auto step = state.find(kOptimizerStepKey);
  steps_ = step == state.end() ? 0 : step->second.item<int64_t>();
  held_.clear();
  held_step_ = -1;
}

void FakeLocalOptimizer::Hold(int64_t step, const TensorMap& grads, bool add) {
  absl::MutexLock lock(&mu_);
  if (!add || held_step_ != step) held_.clear();
  AddInto(held_, grads);
  held_step_ = step;
}

absl::StatusOr<int64_t> FakeLocalOptimizer::Join(const v1::JoinGroupRequest& request) {
  std::shared_ptr<FakeGroup> group;
  if (request.size() > 1) {
    group = FakeGroup::Named(absl::StrCat(request.store_host(), ":", request.store_port(), "/", request.prefix()),
                             request.size());
    const absl::Duration timeout =
        request.join_timeout_ms() > 0 ? absl::Milliseconds(request.join_timeout_ms()) : absl::Seconds(10);
    if (absl::Status joined = group->Join(timeout); !joined.ok()) return joined;
  }
  absl::MutexLock lock(&mu_);
  group_ = group;
  rank_ = request.rank();
  return steps_;
}

absl::StatusOr<v1::ReduceResponse> FakeLocalOptimizer::Reduce(int64_t step) {
  std::shared_ptr<FakeGroup> group;
  TensorMap part;
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    if (held_step_ != step) return absl::FailedPreconditionError(absl::StrCat("no gradients held for step ", step));
    group = group_;
    part = held_;
    rank = rank_;
  }
  TensorMap sum = part;
  if (group) {
    absl::StatusOr<TensorMap> summed = group->Sum(step, rank, part);
    if (!summed.ok()) return summed.status();
    sum = std::move(*summed);
  }
  v1::ReduceResponse response;
  for (const std::string& name : names_) {
    response.add_squared_norms(sum.at(name).to(at::kDouble).pow(2).sum().item<double>());
  }
  absl::MutexLock lock(&mu_);
  reduced_ = std::move(sum);
  return response;
}

absl::StatusOr<int64_t> FakeLocalOptimizer::Update(const v1::UpdateRequest& request) {
  absl::MutexLock lock(&mu_);
  if (steps_ < 0) return absl::FailedPreconditionError("Update without a loaded state");
  for (const std::string& name : names_) {
    adapters_[name] = adapters_[name] - reduced_.at(name) * (request.lr() * request.clip_scale());
  }
  return ++steps_;
}

TensorMap FakeLocalOptimizer::State(bool optimizer_state, int numel) const {
  absl::MutexLock lock(&mu_);
  TensorMap out;
  for (const std::string& name : names_) {
    auto it = adapters_.find(name);
    out[name] = it != adapters_.end() ? it->second : at::zeros({numel});
  }
  if (optimizer_state && steps_ >= 0) out[kOptimizerStepKey] = at::scalar_tensor(steps_, at::kLong);
  return out;
}

void FakeLocalOptimizer::Forget() {
  Break();
  absl::MutexLock lock(&mu_);
  adapters_.clear();
  steps_ = -1;
  held_.clear();
  held_step_ = -1;
  group_.reset();
}

void FakeLocalOptimizer::Break() {
  absl::MutexLock lock(&mu_);
  if (group_) group_->Break();
}

}  // namespace baton
