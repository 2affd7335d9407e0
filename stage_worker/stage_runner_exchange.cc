// StageRunner's part in the data-parallel replicas' exchange with a stage-local optimizer (stage_runner.h): the peer
// group, the reduction, the update and the state, each under the run lock (never while a step runs).
#include <absl/strings/str_cat.h>

#include <chrono>

#include "core/train/common.h"
#include "core/train/optimizer.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "stage_worker/stage_runner.h"

namespace baton {

absl::Status StageRunner::CheckExchangeJob(const std::string& job_id, const std::string& config_hash,
                                           const std::string& what) {
  if (!configured_) return absl::FailedPreconditionError(absl::StrCat(name(), ": not configured"));
  ASSIGN_OR_RETURN(ExpectedStageIO expected, Expected());
  return Annotate(CheckStepJob(expected, job_id, config_hash, what), name());
}

absl::StatusOr<v1::JoinGroupResponse> StageRunner::JoinGroup(const v1::JoinGroupRequest& req,
                                                             const std::string& caller_host) {
  absl::MutexLock lock(&run_mu_);
  RETURN_IF_ERROR(CheckExchangeJob(req.job_id(), req.config_hash(), "JoinGroup"));
  PeerGroupSpec spec;
  spec.store_host = req.store_host().empty() ? caller_host : req.store_host();
  spec.store_port = req.store_port();
  spec.prefix = req.prefix();
  spec.rank = req.rank();
  spec.size = req.size();
  spec.bind_host = req.bind_host();
  if (req.timeout_ms() > 0) spec.timeout = absl::Milliseconds(req.timeout_ms());
  if (req.join_timeout_ms() > 0) spec.join_timeout = absl::Milliseconds(req.join_timeout_ms());
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Annotate(optimizer_.JoinGroup(spec, req.optimizer()), name()));
  v1::JoinGroupResponse response;
  response.set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  response.set_optimizer_steps(optimizer_.Steps());
  if (spec.size > 1)
    LogInfo(name(), ": joined peer group ", spec.prefix, " as rank ", spec.rank, " of ", spec.size, " in ",
            response.seconds(), " s");
  return response;
}

absl::StatusOr<v1::ReduceResponse> StageRunner::Reduce(const v1::ReduceRequest& req) {
  absl::MutexLock lock(&run_mu_);
  RETURN_IF_ERROR(CheckExchangeJob(req.job_id(), req.config_hash(), "Reduce"));
  progress_.Set(absl::StrCat("summing the gradients of step ", req.step() + 1, " with the other replicas"));
  absl::StatusOr<v1::ReduceResponse> response = optimizer_.Reduce(req.step());
  progress_.Set("idle");
  if (!response.ok()) return Annotate(response.status(), name());
  metrics_.Link("replicas").Sent(response->bytes(), response->seconds());
  return response;
}

absl::StatusOr<v1::UpdateResponse> StageRunner::Update(const v1::UpdateRequest& req) {
  absl::MutexLock lock(&run_mu_);
  RETURN_IF_ERROR(CheckExchangeJob(req.job_id(), req.config_hash(), "Update"));
  absl::StatusOr<v1::UpdateResponse> response = optimizer_.Update(req, AllLora());
  if (!response.ok()) return Annotate(response.status(), name());
  return response;
}

absl::Status StageRunner::LoadState(const ReceivedEnvelope& envelope) {
  absl::MutexLock lock(&run_mu_);
  const v1::EnvelopeHeader& h = envelope.header;
  RETURN_IF_ERROR(CheckExchangeJob(h.job_id(), h.config_hash(), "LoadState"));
  if (h.kind() != v1::EnvelopeHeader::LORA_STATE) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": LoadState takes a LORA_STATE envelope"));
  }
  {
    ASSIGN_OR_RETURN(ExpectedStageIO expected, Expected());
    RETURN_IF_ERROR(Annotate(CheckLoraState(expected, envelope.tensors), name()));
  }
  TensorMap adapters, state;
  for (const auto& [key, t] : envelope.tensors) {
    (IsOptimizerStateKey(key) ? state : adapters)[key] = t;
  }
  const std::shared_ptr<DeviceTransfer> transfer = Transfer();
  for (auto& [key, w] : adapters) w = transfer->Upload(w);
  RETURN_IF_ERROR(AssignAllLora(std::move(adapters)));
  return Annotate(optimizer_.Load(state), name());
}

}  // namespace baton
