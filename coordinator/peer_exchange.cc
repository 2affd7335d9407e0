#include "coordinator/peer_exchange.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <chrono>
#include <cmath>

#include "core/train/finite_check.h"
#include "core/train/grad_norm.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "wire/optimizer_settings.h"

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

// The first failure among `statuses`, else OK.
absl::Status FirstError(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
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

PeerExchange::PeerExchange(const OptimizerConfig& optimizer, ReplicaSet* replicas, absl::Duration timeout,
                           bool host_copies)
    : optimizer_config_(optimizer),
      settings_(OptimizerSettingsOf(optimizer)),
      job_id_(replicas->pipeline(0).id()),
      replicas_(replicas),
      timeout_(timeout),
      host_copies_(host_copies),
      stages_(replicas->pipeline(0).size()),
      loaded_(replicas->size(), -1),
      at_update_(replicas->size(), -1) {}

PeerExchange::~PeerExchange() = default;

absl::Status PeerExchange::LoadReplica(int r, const Tensors& state) {
  StagePipeline& pipeline = replicas_->pipeline(r);
  return FirstError(pipeline.CallEach("loading the run's state waits for it", [&](StageClient& client, int s) {
    Tensors piece;
    const std::set<std::string> names(pipeline.params(s).begin(), pipeline.params(s).end());
    for (const auto& [key, t] : state) {  // this stage's adapters and their optimizer state; Prodigy's scalars
      if (names.count(key) || names.count(StateParam(key)) || absl::StartsWith(key, kProdigyScalarsPrefix)) {
        piece[key] = t;
      }
    }
    piece[kOptimizerStepKey] = state.at(kOptimizerStepKey);
    return client.LoadState(job_id_, piece);
  }));
}

absl::Status PeerExchange::Start(const Tensors& master, const Optimizer& optimizer) {
  absl::MutexLock lock(&mu_);
  if (replicas_->size() > 1) {  // one replica sums with nobody
    ASSIGN_OR_RETURN(store_, RendezvousStore::Start());
  }
  started_ = true;
  start_steps_ = optimizer.steps();
  Tensors state = master;
  for (const auto& [key, t] : optimizer.StateDict()) state[key] = t;
  std::vector<int> losses;
  for (int r = 0; r < replicas_->size(); ++r) losses.push_back(replicas_->Losses(r));
  RETURN_IF_ERROR(ParallelFor(replicas_->size(), [&](int r) { return LoadReplica(r, state); }));
  // One replica: its stages keep host copies of what they hold from now on (JoinSolo asks for them).
  if (replicas_->size() == 1 && host_copies_) RETURN_IF_ERROR(JoinSolo(/*take_host_copy_at=*/-1).status());
  loaded_ = losses;
  at_update_.assign(replicas_->size(), 0);
  probed_generation_ = replicas_->pipeline(0).generation();  // loaded just now: nothing to ask before the first step
  cache_ = std::move(state);
  cache_updates_ = updates_ = 0;
  if (store_) {
    LogInfo("replicas: stage-local AdamW, gradients summed over c10d Gloo groups (rendezvous on port ", store_->port(),
            ")");
  } else {
    LogInfo("stage-local AdamW: each stage steps its own adapters; the coordinator reads them back to save them");
  }
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

absl::Status PeerExchange::BeforeSlice(int r) {
  absl::MutexLock lock(&mu_);
  if (!started_) return absl::OkStatus();  // before Start (which loads every replica)
  if (replicas_->size() == 1) return ProbeSolo();
  return LoadCurrent(r);
}

absl::StatusOr<std::vector<v1::JoinGroupResponse>> PeerExchange::JoinSolo(int64_t take_host_copy_at) {
  std::vector<v1::JoinGroupResponse> responses(stages_);
  auto join = [&](StageClient& client, int s) -> absl::Status {
    v1::JoinGroupRequest request;  // a group of one: no store, no socket
    *request.mutable_optimizer() = settings_;
    request.set_prefix(absl::StrCat("solo/", s));
    request.set_size(1);
    request.set_host_copy(host_copies_);
    if (host_copies_ && take_host_copy_at >= 0) request.set_take_host_copy_at(take_host_copy_at);
    ASSIGN_OR_RETURN(responses[s], client.JoinGroup(job_id_, request, kJoinTimeout));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(FirstError(replicas_->pipeline(0).CallEach("the check of its optimizer state waits for it", join)));
  return responses;
}

absl::Status PeerExchange::ProbeSolo() {
  StagePipeline& pipeline = replicas_->pipeline(0);
  // Nothing reconfigured the stages since they last held the current state: they hold it still.
  if (pipeline.generation() == probed_generation_ && Current(0)) return absl::OkStatus();
  const int64_t expected = start_steps_ + updates_;
  ASSIGN_OR_RETURN(const std::vector<v1::JoinGroupResponse> responses, JoinSolo(expected));
  std::vector<int64_t> steps(stages_, -1);
  for (int s = 0; s < stages_; ++s) {
    steps[s] = responses[s].optimizer_steps();
    if (!responses[s].took_host_copy().empty()) {
      LogWarning(pipeline.StageName(s), ": took back its adapters and optimizer state of step ", expected,
                 " from its host copy (", responses[s].took_host_copy(), "); nothing to redo but the step it lost");
    }
  }
  std::vector<std::string> stale;
  for (int s = 0; s < stages_; ++s) {
    if (steps[s] != expected) {
      stale.push_back(absl::StrCat(pipeline.StageName(s),
                                   steps[s] < 0 ? " (no state)" : absl::StrCat(" (at step ", steps[s], ")")));
    }
  }
  if (!stale.empty()) {
    const std::string who = absl::StrJoin(stale, ", ");
    if (cache_updates_ != updates_) {
      state_lost_ = true;
      return absl::DataLossError(absl::StrCat("the adapters and optimizer state of step ", expected, " are lost with ",
                                              who, "; the coordinator holds those of step ",
                                              start_steps_ + cache_updates_));
    }
    RETURN_IF_ERROR(LoadReplica(0, cache_));
    LogWarning(who, ": loaded with the run's state of step ", expected, " (the coordinator's copy)");
  }
  loaded_[0] = replicas_->Losses(0);
  at_update_[0] = updates_;
  members_ = {0};
  probed_generation_ = pipeline.generation();
  return absl::OkStatus();
}

bool PeerExchange::StateLost() {
  absl::MutexLock lock(&mu_);
  return state_lost_;
}

absl::StatusOr<int64_t> PeerExchange::RollBack() {
  absl::MutexLock lock(&mu_);
  std::vector<int> ready;
  for (int r = 0; r < replicas_->size(); ++r) {
    if (replicas_->Ready(r)) ready.push_back(r);
  }
  if (ready.empty()) return absl::UnavailableError("no replica is ready to take the run's state");
  std::vector<int> losses;
  for (int r : ready) losses.push_back(replicas_->Losses(r));
  const Tensors state = cache_;
  RETURN_IF_ERROR(ParallelFor(static_cast<int>(ready.size()), [&](int k) { return LoadReplica(ready[k], state); }));
  updates_ = cache_updates_;
  for (size_t k = 0; k < ready.size(); ++k) {
    loaded_[ready[k]] = losses[k];
    at_update_[ready[k]] = updates_;
  }
  members_.clear();
  state_lost_ = false;
  return updates_;
}

bool PeerExchange::BeforeStep(int64_t step, const std::vector<int>& replicas) {
  absl::MutexLock lock(&mu_);
  if (!started_ || replicas_->size() == 1) return false;
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
  absl::Status last =
      absl::DataLossError(absl::StrCat("no replica holds the run's state of step ", start_steps_ + updates_,
                                       "; the coordinator holds that of step ", start_steps_ + cache_updates_));
  for (int q = 0; q < replicas_->size(); ++q) {
    if (q == except || !replicas_->Ready(q) || !Current(q)) continue;
    absl::StatusOr<Tensors> state = replicas_->pipeline(q).Adapters(/*optimizer_state=*/true);
    if (!state.ok()) {
      last = state.status();
      continue;
    }
    cache_ = std::move(*state);
    cache_updates_ = updates_;
    return cache_;
  }
  if (absl::IsDataLoss(last)) state_lost_ = true;
  return last;
}

absl::Status PeerExchange::Pull(Tensors& master, Optimizer& optimizer) {
  absl::MutexLock lock(&mu_);
  // One replica, recovered since it was last asked: its stages may have lost the state (DATA_LOSS, state_lost_).
  if (started_ && replicas_->size() == 1) RETURN_IF_ERROR(ProbeSolo());
  ASSIGN_OR_RETURN(Tensors state, CurrentState(-1));
  Tensors moments;
  for (const auto& [key, t] : state) {
    if (IsOptimizerStateKey(key)) {
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
                                      const std::vector<absl::Status>& results, const std::string& what) {
  absl::Status first = absl::OkStatus();
  for (size_t k = 0; k < replicas.size(); ++k) {
    if (results[k].ok()) continue;
    if (first.ok() || absl::IsAborted(first)) first = results[k];
    if (!absl::IsAborted(results[k])) RETURN_IF_ERROR(replicas_->TakeOut(replicas[k], step, results[k]));
  }
  if (first.ok()) return first;
  return absl::AbortedError(absl::StrCat("step ", step + 1, ": ", what, " failed (", first.message(), ")"));
}

std::vector<absl::Status> PeerExchange::CallMembers(
    const std::vector<int>& members, const std::string& doing,
    const std::function<absl::Status(StageClient&, int rank, int stage)>& call) {
  const int n = static_cast<int>(members.size());
  std::vector<absl::Status> results(n * stages_);
  auto one = [&](int k) {
    const std::vector<absl::Status> each =
        replicas_->pipeline(members[k]).CallEach(doing, [&](StageClient& client, int s) { return call(client, k, s); });
    std::copy(each.begin(), each.end(), results.begin() + k * stages_);
    return absl::OkStatus();
  };
  if (n == 1) {
    (void)one(0);  // no thread for a lone replica
  } else {
    (void)ParallelFor(n, one);
  }
  return results;
}

std::vector<absl::Status> PeerExchange::JoinAll(const std::vector<int>& members) {
  members_.clear();
  const std::string base = absl::StrCat(replicas_->pipeline(0).run_id(), "/", ++formations_);
  const int n = static_cast<int>(members.size());
  const int port = store_ ? store_->port() : 0;
  auto join = [&](StageClient& client, int rank, int s) {
    v1::JoinGroupRequest request;
    *request.mutable_optimizer() = settings_;
    request.set_store_port(port);  // the host: this coordinator, as the worker sees it
    request.set_prefix(absl::StrCat(base, "/stage", s));
    request.set_rank(rank);
    request.set_size(n);
    request.set_bind_host(AddressHost(client.address()));
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout_));
    request.set_join_timeout_ms(absl::ToInt64Milliseconds(kJoinTimeout));
    request.set_host_copy(host_copies_ && replicas_->size() == 1);  // with more, a lost one loads from the others
    return client.JoinGroup(job_id_, request, kJoinTimeout).status();
  };
  std::vector<absl::Status> per_replica =
      PerReplica(CallMembers(members, "forming the peer groups waits for it", join), stages_);
  bool all = true;
  for (const absl::Status& s : per_replica) all &= s.ok();
  if (all) members_ = members;
  return per_replica;
}

absl::Status PeerExchange::FormGroups(int64_t step, const std::vector<int>& members) {
  return LoseFailed(step, members, JoinAll(members), "forming the peer groups");
}

absl::StatusOr<std::vector<std::map<std::string, double>>> PeerExchange::Reduce(int64_t step,
                                                                                const std::vector<int>& members,
                                                                                ExchangeResult& result) {
  const int n = static_cast<int>(members.size());
  std::vector<absl::StatusOr<v1::ReduceResponse>> out(n * stages_, absl::UnknownError("not run"));
  const std::vector<absl::Status> results = CallMembers(
      members, absl::StrCat("step ", step + 1, "'s gradient sum waits for it"), [&](StageClient& client, int k, int s) {
        absl::StatusOr<v1::ReduceResponse>& mine = out[k * stages_ + s];
        mine = client.Reduce(job_id_, step, timeout_);
        return mine.status();
      });
  absl::Status failed = LoseFailed(step, members, PerReplica(results, stages_), "summing the gradients");
  if (!failed.ok()) {
    members_.clear();  // the groups are spent
    return failed;
  }
  // Every member got the same bytes: the norms must agree to the bit.
  std::vector<std::map<std::string, double>> norms(stages_);
  result.reduce_seconds = 0;
  result.early = true;
  for (int k = 0; k < n * stages_; ++k) {
    result.reduce_seconds = std::max(result.reduce_seconds, out[k]->seconds());
    result.early &= out[k]->begun_when_held();
    const std::vector<std::string>& names = replicas_->pipeline(members[k / stages_]).params(k % stages_);
    if (out[k]->squared_norms_size() != static_cast<int>(names.size())) {
      return absl::DataLossError(absl::StrCat("step ", step + 1, ": stage ", k % stages_, " sent ",
                                              out[k]->squared_norms_size(), " squared norms for its ", names.size(),
                                              " LoRA parameters"));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names[i];
      const double sq = out[k]->squared_norms(static_cast<int>(i));
      auto [it, first] = norms[k % stages_].emplace(name, sq);
      if (!first && it->second != sq) {
        return absl::DataLossError(absl::StrCat("step ", step + 1, ": the replicas' reduced gradients of ", name,
                                                " differ (squared norms ", it->second, " and ", sq, ")"));
      }
    }
  }
  return norms;
}

absl::StatusOr<std::vector<int>> PeerExchange::Update(int64_t step, const std::vector<int>& members, double lr,
                                                      double norm) {
  v1::UpdateRequest request;
  request.set_step(step);
  request.set_lr(lr);
  // Every trainer's rule and factor, to the bit (grad_norm.h).
  request.set_clip_scale(ClipFactor(norm, optimizer_config_.clip));
  request.set_clip(request.clip_scale() != 1.0);
  if (optimizer_config_.type == "prodigy" && lr > 0) {  // (at rate 0 prodigyopt estimates nothing)
    ASSIGN_OR_RETURN(ProdigyOutcome outcome, EstimateProdigy(step, members, request));
    *request.mutable_prodigy() = ProdigyScalarsProto(outcome.scalars);
    request.set_prodigy_apply(outcome.apply);
  }
  const int n = static_cast<int>(members.size());
  const std::vector<absl::Status> results =
      CallMembers(members, absl::StrCat("step ", step + 1, "'s update waits for it"),
                  [&](StageClient& client, int, int) { return client.Update(job_id_, request).status(); });
  std::vector<int> updated;
  const std::vector<absl::Status> per_replica = PerReplica(results, stages_);
  for (int k = 0; k < n; ++k) {
    if (per_replica[k].ok()) {
      updated.push_back(members[k]);
      continue;
    }
    members_.clear();
    RETURN_IF_ERROR(replicas_->TakeOut(members[k], step, per_replica[k]));
  }
  if (updated.empty()) {  // each stage applied it, or not: Prepare finds out which and loads, or rolls back
    return absl::AbortedError(
        absl::StrCat("step ", step + 1, ": no replica completed its update (", per_replica.front().message(), ")"));
  }
  return updated;
}

absl::StatusOr<ProdigyOutcome> PeerExchange::EstimateProdigy(int64_t step, const std::vector<int>& members,
                                                             const v1::UpdateRequest& update) {
  v1::UpdateRequest request = update;
  request.set_estimate(true);
  const int n = static_cast<int>(members.size());
  std::vector<absl::StatusOr<v1::UpdateResponse>> out(n * stages_, absl::UnknownError("not run"));
  const std::vector<absl::Status> results =
      CallMembers(members, absl::StrCat("step ", step + 1, "'s step-size estimate waits for it"),
                  [&](StageClient& client, int k, int s) {
                    absl::StatusOr<v1::UpdateResponse>& mine = out[k * stages_ + s];
                    mine = client.Update(job_id_, request);
                    return mine.status();
                  });
  absl::Status failed = LoseFailed(step, members, PerReplica(results, stages_), "Prodigy's estimate");
  if (!failed.ok()) {
    members_.clear();
    return failed;
  }
  // Every member holds the same adapters and sums: its terms and scalars must agree to the bit.
  std::map<std::string, std::pair<double, double>> terms;
  const v1::ProdigyScalars& first = out[0]->prodigy();
  for (int k = 0; k < n * stages_; ++k) {
    const std::vector<std::string>& names = replicas_->pipeline(members[k / stages_]).params(k % stages_);
    const v1::UpdateResponse& r = *out[k];
    if (r.prodigy_terms_size() != 2 * static_cast<int>(names.size())) {
      return absl::DataLossError(absl::StrCat("step ", step + 1, ": stage ", k % stages_, " sent ",
                                              r.prodigy_terms_size(), " terms of Prodigy's estimate for its ",
                                              names.size(), " LoRA parameters"));
    }
    if (r.prodigy().SerializeAsString() != first.SerializeAsString()) {
      return absl::DataLossError(absl::StrCat("step ", step + 1, ": stage ", k % stages_, " holds Prodigy's d ",
                                              r.prodigy().d(), ", stage 0 ", first.d()));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const std::pair<double, double> t = {r.prodigy_terms(2 * i), r.prodigy_terms(2 * i + 1)};
      auto [it, fresh] = terms.emplace(names[i], t);
      if (!fresh && it->second != t) {
        return absl::DataLossError(
            absl::StrCat("step ", step + 1, ": the replicas' terms of Prodigy's estimate for ", names[i], " differ"));
      }
    }
  }
  ProdigyOutcome outcome;
  outcome.scalars = ProdigyScalarsOf(first);
  std::vector<double> flat;
  for (const auto& [name, t] : terms) {  // by name over every stage, as one process adds them
    flat.push_back(t.first);
    flat.push_back(t.second);
  }
  const double dlr = ProdigyDlr(optimizer_config_, outcome.scalars, update.lr());
  outcome.apply = ProdigyNext(optimizer_config_, dlr, flat, outcome.scalars);
  return outcome;
}

absl::StatusOr<ExchangeResult> PeerExchange::Apply(int64_t step, const std::vector<int>& participants,
                                                   const std::vector<double>& losses, double lr) {
  absl::MutexLock lock(&mu_);
  const auto t0 = std::chrono::steady_clock::now();
  ExchangeResult result;
  for (int r : participants) {
    if (!replicas_->Ready(r) || !Current(r)) {
      return absl::AbortedError(absl::StrCat("step ", step + 1, ": replica ", r, " was lost after its micro-batches"));
    }
  }
  if (participants != members_) {
    RETURN_IF_ERROR(FormGroups(step, participants));
    result.regrouped = true;
  }
  ASSIGN_OR_RETURN(auto norms, Reduce(step, participants, result));  // [stage] name → squared norm
  RETURN_IF_ERROR(CheckStepFinite(step + 1, lr, losses, stages_ - 1, norms));
  std::map<std::string, double> all;
  for (const auto& stage : norms) all.insert(stage.begin(), stage.end());
  result.grad_norm = GlobalNorm(all);  // by name over every stage, as every trainer adds them
  ASSIGN_OR_RETURN(std::vector<int> updated, Update(step, participants, lr, result.grad_norm));
  ++updates_;
  for (int r : updated) at_update_[r] = updates_;
  result.seconds = SecondsSince(t0);
  return result;
}

}  // namespace baton
