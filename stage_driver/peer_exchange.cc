#include "stage_driver/peer_exchange.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <chrono>
#include <cmath>

#include "core/train/finite_check.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Forming a group among live workers takes milliseconds; a member that never comes fails it after this.
constexpr absl::Duration kJoinTimeout = absl::Seconds(10);

// Per replica, the first failure of its stages, one on its own account before one that is a peer's (ABORTED).
std::vector<absl::Status> PerReplica(const std::vector<absl::Status>& per_stage, int stages) {
  std::vector<absl::Status> out(per_stage.size() / stages);
  for (size_t k = 0; k < per_stage.size(); ++k) {
    const absl::Status& stage = per_stage[k];
    absl::Status& replica = out[k / stages];
    if (!stage.ok() && (replica.ok() || (absl::IsAborted(replica) && !absl::IsAborted(stage)))) replica = stage;
  }
  return out;
}

}  // namespace

std::string AddressHost(const std::string& address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

PeerExchange::PeerExchange(const JobConfig& job, ReplicaSet* replicas, absl::Duration timeout)
    : optimizer_config_(job.optimizer),
      job_id_(replicas->fleet(0).job_id),
      replicas_(replicas),
      timeout_(timeout),
      stages_(replicas->fleet(0).size()),
      loaded_(replicas->size(), -1),
      at_update_(replicas->size(), -1) {}

PeerExchange::~PeerExchange() = default;

absl::Status PeerExchange::LoadReplica(int r, const Tensors& state) {
  StageFleet& fleet = replicas_->fleet(r);
  return ParallelFor(fleet.size(), [&](int s) {
    Tensors piece;
    for (const std::string& name : fleet.params[s]) {
      std::vector<std::string> keys = MomentKeys(name);
      keys.push_back(name);
      for (const std::string& key : keys) {
        auto it = state.find(key);
        if (it != state.end()) piece[key] = it->second;
      }
    }
    piece[kAdamWStepKey] = state.at(kAdamWStepKey);
    return fleet.clients[s]->LoadState(job_id_, piece);
  });
}

absl::Status PeerExchange::Start(const Tensors& master, const AdamW& optimizer) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(store_, RendezvousStore::Start());
  Tensors state = master;
  for (const auto& [key, t] : optimizer.StateDict()) state[key] = t;
  std::vector<int> losses;
  for (int r = 0; r < replicas_->size(); ++r) losses.push_back(replicas_->Losses(r));
  RETURN_IF_ERROR(ParallelFor(replicas_->size(), [&](int r) { return LoadReplica(r, state); }));
  loaded_ = losses;
  at_update_.assign(replicas_->size(), 0);
  cache_ = std::move(state);
  cache_updates_ = updates_ = 0;
  LogInfo("replicas: stage-local AdamW, gradients summed over c10d Gloo groups (rendezvous on port ", store_->port(),
          ")");
  return absl::OkStatus();
}

bool PeerExchange::Current(int r) { return loaded_[r] == replicas_->Losses(r) && at_update_[r] == updates_; }

absl::Status PeerExchange::LoadCurrent(int r) {
  if (Current(r)) return absl::OkStatus();
  const int losses = replicas_->Losses(r);
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(Tensors state, CurrentState(r));
  RETURN_IF_ERROR(LoadReplica(r, state));
  loaded_[r] = losses;
  at_update_[r] = updates_;
  members_.clear();  // its stages are in no group of ours now
  LogInfo("replica ", r, " loaded with the run's current state in ", SecondsSince(t0), " s");
  return absl::OkStatus();
}

absl::Status PeerExchange::Prepare(int r) {
  absl::MutexLock lock(&mu_);
  if (!store_) return absl::OkStatus();  // before Start (which loads every replica)
  return LoadCurrent(r);
}

bool PeerExchange::BeforeStep(int64_t step, const std::vector<int>& replicas) {
  absl::MutexLock lock(&mu_);
  if (!store_) return false;
  for (int r : replicas) {
    if (absl::Status loaded = LoadCurrent(r); !loaded.ok()) {
      LogWarning("step ", step + 1, ": replica ", r, " could not be loaded before the step: ", loaded.message());
      return false;
    }
  }
  if (replicas == members_) return true;
  for (const absl::Status& s : JoinAll(replicas)) {
    if (!s.ok()) {
      LogWarning("step ", step + 1, ": the peer groups could not be formed before the step (", s.message(),
                 "); the gradients are summed after it");
      return false;
    }
  }
  return true;
}

absl::StatusOr<PeerExchange::Tensors> PeerExchange::CurrentState(int except) {
  if (cache_updates_ == updates_) return cache_;
  absl::Status last = absl::FailedPreconditionError("no replica holds the run's current state");
  for (int q = 0; q < replicas_->size(); ++q) {
    if (q == except || !replicas_->Ready(q) || !Current(q)) continue;
    StageFleet& fleet = replicas_->fleet(q);
    std::vector<Tensors> parts(fleet.size());
    absl::Status pulled = ParallelFor(fleet.size(), [&](int s) -> absl::Status {
      ASSIGN_OR_RETURN(parts[s], fleet.clients[s]->GetLora(job_id_, /*optimizer_state=*/true));
      return absl::OkStatus();
    });
    if (!pulled.ok()) {
      last = pulled;
      continue;
    }
    Tensors state;
    for (Tensors& part : parts) state.merge(part);
    cache_ = std::move(state);
    cache_updates_ = updates_;
    return cache_;
  }
  return last;
}

absl::Status PeerExchange::Pull(Tensors& master, AdamW& optimizer) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Tensors state, CurrentState(-1));
  Tensors moments;
  for (const auto& [key, t] : state) {
    if (key == kAdamWStepKey || !MomentParam(key).empty()) {
      moments[key] = t;
    } else if (master.count(key)) {
      master[key] = t;
    } else {
      return absl::DataLossError(absl::StrCat("a replica holds an adapter the run has not: ", key));
    }
  }
  return optimizer.LoadStateDict(moments);
}

absl::Status PeerExchange::LoseFailed(int64_t step, const std::vector<int>& replicas,
                                      const std::vector<absl::Status>& results, const std::string& what,
                                      const std::function<void()>& on_abort) {
  absl::Status first = absl::OkStatus();
  for (size_t k = 0; k < replicas.size(); ++k) {
    if (results[k].ok()) continue;
    if (first.ok() || absl::IsAborted(first)) first = results[k];
    if (!absl::IsAborted(results[k])) RETURN_IF_ERROR(replicas_->TakeOut(replicas[k], step, results[k], on_abort));
  }
  if (first.ok()) return first;
  return absl::AbortedError(absl::StrCat("step ", step + 1, ": ", what, " failed (", first.message(), ")"));
}

std::vector<absl::Status> PeerExchange::JoinAll(const std::vector<int>& members) {
  members_.clear();
  const std::string base = absl::StrCat(replicas_->fleet(0).run_id, "/", ++formations_);
  const int n = static_cast<int>(members.size());
  std::vector<absl::Status> results(n * stages_);
  const int port = store_->port();
  (void)ParallelFor(n * stages_, [&](int k) {
    const int rank = k / stages_, s = k % stages_;
    StageClient& client = *replicas_->fleet(members[rank]).clients[s];
    v1::JoinGroupRequest request;
    request.set_store_port(port);  // the host: this coordinator, as the worker sees it
    request.set_prefix(absl::StrCat(base, "/stage", s));
    request.set_rank(rank);
    request.set_size(n);
    request.set_bind_host(AddressHost(client.address()));
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout_));
    request.set_join_timeout_ms(absl::ToInt64Milliseconds(kJoinTimeout));
    results[k] = client.JoinGroup(job_id_, request, kJoinTimeout);
    return absl::OkStatus();
  });
  std::vector<absl::Status> per_replica = PerReplica(results, stages_);
  bool all = true;
  for (const absl::Status& s : per_replica) all &= s.ok();
  if (all) members_ = members;
  return per_replica;
}

absl::Status PeerExchange::FormGroups(int64_t step, const std::vector<int>& members,
                                      const std::function<void()>& on_abort) {
  return LoseFailed(step, members, JoinAll(members), "forming the peer groups", on_abort);
}

absl::StatusOr<std::map<std::string, double>> PeerExchange::Reduce(int64_t step, const std::vector<int>& members,
                                                                   ExchangeResult& result,
                                                                   const std::function<void()>& on_abort) {
  const int n = static_cast<int>(members.size());
  std::vector<absl::StatusOr<v1::ReduceResponse>> out(n * stages_, absl::UnknownError("not run"));
  (void)ParallelFor(n * stages_, [&](int k) {
    out[k] = replicas_->fleet(members[k / stages_]).clients[k % stages_]->Reduce(job_id_, step, timeout_);
    return absl::OkStatus();
  });
  std::vector<absl::Status> results;
  for (const auto& o : out) results.push_back(o.status());
  absl::Status failed = LoseFailed(step, members, PerReplica(results, stages_), "summing the gradients", on_abort);
  if (!failed.ok()) {
    members_.clear();  // the groups are spent
    return failed;
  }
  // Every member got the same bytes: the norms must agree to the bit.
  std::map<std::string, double> norms;
  result.reduce_seconds = 0;
  result.early = true;
  for (int k = 0; k < n * stages_; ++k) {
    result.reduce_seconds = std::max(result.reduce_seconds, out[k]->seconds());
    result.early &= out[k]->begun_when_held();
    for (const auto& [name, sq] : out[k]->squared_norms()) {
      auto [it, first] = norms.emplace(name, sq);
      if (!first && it->second != sq) {
        return absl::DataLossError(absl::StrCat("step ", step + 1, ": the replicas' reduced gradients of ", name,
                                                " differ (squared norms ", it->second, " and ", sq, ")"));
      }
    }
  }
  return norms;
}

absl::StatusOr<std::vector<int>> PeerExchange::Update(int64_t step, const std::vector<int>& members, double lr,
                                                      double norm, const std::function<void()>& on_abort) {
  v1::UpdateRequest request;
  request.set_step(step);
  request.set_lr(lr);
  request.set_beta1(optimizer_config_.beta1);
  request.set_beta2(optimizer_config_.beta2);
  request.set_eps(optimizer_config_.eps);
  request.set_weight_decay(optimizer_config_.weight_decay);
  // ClipGradNorm's rule and factor, to the bit.
  const double clip = optimizer_config_.clip;
  request.set_clip(clip > 0 && norm > clip);
  request.set_clip_scale(request.clip() ? clip / (norm + 1e-6) : 1.0);
  const int n = static_cast<int>(members.size());
  std::vector<absl::Status> results(n * stages_);
  (void)ParallelFor(n * stages_, [&](int k) {
    results[k] = replicas_->fleet(members[k / stages_]).clients[k % stages_]->Update(job_id_, request);
    return absl::OkStatus();
  });
  std::vector<int> updated;
  const std::vector<absl::Status> per_replica = PerReplica(results, stages_);
  for (int k = 0; k < n; ++k) {
    if (per_replica[k].ok()) {
      updated.push_back(members[k]);
      continue;
    }
    members_.clear();
    RETURN_IF_ERROR(replicas_->TakeOut(members[k], step, per_replica[k], on_abort));
  }
  if (updated.empty()) {
    return absl::DataLossError(absl::StrCat("step ", step + 1, ": no replica completed its update (",
                                            per_replica.front().message(),
                                            "); the run's state is lost: resume from the last checkpoint"));
  }
  return updated;
}

absl::StatusOr<ExchangeResult> PeerExchange::Apply(int64_t step, const std::vector<int>& participants,
                                                   const std::vector<double>& losses, double lr,
                                                   const std::function<void()>& on_abort) {
  absl::MutexLock lock(&mu_);
  const auto t0 = std::chrono::steady_clock::now();
  ExchangeResult result;
  for (int r : participants) {
    if (!replicas_->Ready(r) || !Current(r)) {
      return absl::AbortedError(absl::StrCat("step ", step + 1, ": replica ", r, " was lost after its micro-batches"));
    }
  }
  if (participants != members_) {
    RETURN_IF_ERROR(FormGroups(step, participants, on_abort));
    result.regrouped = true;
  }
  ASSIGN_OR_RETURN(auto norms, Reduce(step, participants, result, on_abort));
  RETURN_IF_ERROR(CheckStepFinite(step + 1, lr, losses, stages_ - 1, {}));
  double sq = 0;
  for (const auto& [name, v] : norms) sq += v;  // ClipGradNorm's order: by name over every stage
  result.grad_norm = std::sqrt(sq);
  if (!std::isfinite(result.grad_norm)) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step + 1, ": a LoRA gradient is NaN or infinite (lr ", lr,
                                                   "): lower the learning rate or check the data"));
  }
  ASSIGN_OR_RETURN(std::vector<int> updated, Update(step, participants, lr, result.grad_norm, on_abort));
  ++updates_;
  for (int r : updated) at_update_[r] = updates_;
  result.seconds = SecondsSince(t0);
  return result;
}

}  // namespace baton
