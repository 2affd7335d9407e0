// StageRunner's part in the data-parallel replicas' exchange with a stage-local optimizer (stage_runner.h): the peer
// group, the reduction, the update and the state, each under the run lock (never while a step runs).
#include <absl/strings/str_cat.h>

#include <chrono>
#include <optional>

#include "core/device/bulk_copy.h"
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
  if (req.host_copy()) {
    host_copy_.Use(req.job_id(), config_.run_id(), stage_index_);
  } else {
    host_copy_.Drop();
  }
  const int64_t wanted = req.has_take_host_copy_at() ? req.take_host_copy_at() : -1;
  std::optional<TensorMap> copy;
  if (wanted >= 0 && optimizer_.Steps() != wanted) copy = host_copy_.Take(wanted);
  if (copy) {
    RETURN_IF_ERROR(LoadStateLocked(*copy));
    response.set_took_host_copy(host_copy_.path());
    LogInfo(name(), ": took the adapters and optimizer state of step ", wanted, " back from its host copy ",
            host_copy_.path());
  } else if (host_copy_.active() && optimizer_.Steps() >= 0) {
    WriteHostCopy();  // the state loaded before the copies were asked for (the run's start)
  }
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
  if (!req.estimate() && host_copy_.active()) WriteHostCopy();  // before the answer: a stage that answered has it
  return response;
}

absl::Status StageRunner::LoadState(const ReceivedEnvelope& envelope) {
  absl::MutexLock lock(&run_mu_);
  const v1::EnvelopeHeader& h = envelope.header;
  RETURN_IF_ERROR(CheckExchangeJob(h.job_id(), h.config_hash(), "LoadState"));
  if (h.kind() != v1::EnvelopeHeader::LORA_STATE) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": LoadState takes a LORA_STATE envelope"));
  }
  RETURN_IF_ERROR(LoadStateLocked(envelope.tensors));
  if (host_copy_.active()) WriteHostCopy();
  return absl::OkStatus();
}

absl::Status StageRunner::LoadStateLocked(const TensorMap& tensors) {
  {
    ASSIGN_OR_RETURN(ExpectedStageIO expected, Expected());
    RETURN_IF_ERROR(Annotate(CheckLoraState(expected, tensors), name()));
  }
  TensorMap adapters, state;
  for (const auto& [key, t] : tensors) {
    (IsOptimizerStateKey(key) ? state : adapters)[key] = t;
  }
  RETURN_IF_ERROR(AssignAllLora(UploadAll(adapters, device_)));  // a few copies, none waited for
  return Annotate(optimizer_.Load(state), name());
}

void StageRunner::WriteHostCopy() {
  TensorMap state = optimizer_.StateView();  // the live tensors (the run lock is held)
  for (const auto& [name, p] : AllLora()) state[name] = p.detach().to(at::kFloat);
  // A few copies and one wait, not one synchronizing copy per tensor; on the CPU the live tensors themselves (written
  // out before this lock is released).
  state = DownloadAll(state, std::nullopt, HostTensors::kShare);
  const bool first = host_copy_.writes() == 0;
  absl::StatusOr<double> seconds = host_copy_.Write(state);
  if (!seconds.ok()) {
    LogWarning(name(), ": the host copy of this stage's state could not be written (", seconds.status().message(),
               "); a restarted worker will take the coordinator's copy");
    host_copy_.Drop();
    return;
  }
  if (first) {
    LogInfo(name(), ": keeps its adapters and optimizer state in ", host_copy_.path(), " (", *seconds * 1e3,
            " ms a copy, after every update)");
  }
}

}  // namespace baton
