#include "stage_worker/stage_tenants.h"

#include <algorithm>

#include "core/util/log.h"
#include "core/util/status.h"
#include "rpc/frozen_key.h"

namespace baton {

StageTenants::StageTenants(StageRunnerOptions options) : device_(options.device), options_(std::move(options)) {
  if (!options_.compute_turns) options_.compute_turns = std::make_shared<ComputeTurns>();
  plain_ = std::make_shared<StageRunner>(options_);
}

std::vector<FrozenTensors> StageTenants::SharedFrozen(const std::string& key, const StageRunner* self) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [job, runner] : by_job_) {
    if (runner.get() == self) continue;
    std::vector<FrozenTensors> frozen = runner->FrozenFor(key);
    if (!frozen.empty()) return frozen;
  }
  return {};
}

std::shared_ptr<StageRunner> StageTenants::RunnerToJoin(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job_id);
  if (it != by_job_.end()) return it->second;
  if (by_job_.empty()) return plain_;
  return std::make_shared<StageRunner>(options_);
}

absl::StatusOr<v1::ConfigureResponse> StageTenants::Configure(const v1::ConfigureRequest& req) {
  absl::MutexLock configure_lock(&configure_mu_);
  if (!req.shared()) {
    std::shared_ptr<StageRunner> plain;
    {
      absl::MutexLock lock(&mu_);
      plain = plain_;
    }
    ASSIGN_OR_RETURN(auto response, plain->Configure(req));
    absl::MutexLock lock(&mu_);
    by_job_.clear();  // the others' steps end with their coordinators (their runners live while a call holds one)
    by_job_[req.job_id()] = plain_;
    return response;
  }
  std::shared_ptr<StageRunner> runner = RunnerToJoin(req.job_id());
  const std::vector<FrozenTensors> frozen = SharedFrozen(FrozenWeightsKey(req, device_), runner.get());
  ASSIGN_OR_RETURN(auto response, runner->Configure(req, frozen.empty() ? nullptr : &frozen));
  absl::MutexLock lock(&mu_);
  by_job_[req.job_id()] = runner;
  LogInfo("stage ", req.stage_index(), ": holds ", by_job_.size(), by_job_.size() == 1 ? " pipeline" : " pipelines");
  return response;
}

std::shared_ptr<StageRunner> StageTenants::For(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job_id);
  return it != by_job_.end() ? it->second : plain_;
}

uint64_t StageTenants::max_push_budget_bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t most = plain_->push_budget_bytes();
  for (const auto& [job, runner] : by_job_) most = std::max(most, runner->push_budget_bytes());
  return most;
}

void StageTenants::Release(const std::string& job_id, const std::string& config_hash) {
  if (job_id.empty() || config_hash != job_id) return;  // the coordinator's config hash is its job id
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job_id);
  if (it == by_job_.end()) return;
  if (it->second == plain_) plain_ = std::make_shared<StageRunner>(options_);
  by_job_.erase(it);
  LogInfo("released pipeline ", job_id, "; ", by_job_.size(), " left");
}

int StageTenants::size() const {
  absl::MutexLock lock(&mu_);
  return std::max<int>(1, static_cast<int>(by_job_.size()));
}

void StageTenants::set_address(const std::string& address) {
  absl::MutexLock lock(&mu_);
  options_.address = address;
  plain_->set_address(address);
  for (const auto& [job, runner] : by_job_) runner->set_address(address);
}

}  // namespace baton
