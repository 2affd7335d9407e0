// The replicas' exchange with a stage-local optimizer (the job's `replica_exchange: allreduce`): matching stages sum
// their gradients over c10d Gloo groups and step AdamW themselves, driven from the coordinator.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "collective/peer_group.h"
#include "coordinator/replica_set.h"
#include "core/train/job.h"
#include "core/train/optimizer.h"

namespace baton {

struct ExchangeResult {
  double grad_norm = 0;       // before clipping
  double reduce_seconds = 0;  // the slowest stage's allreduce
  double seconds = 0;         // groups (when re-formed), reduction and update
  bool regrouped = false;     // the groups were formed after the step's slices (a replica lost or rejoined)
  bool early = false;         // every stage began its sum as soon as it held its gradients
};

// Stage s of every replica forms a c10d Gloo group with stage s of the others (collective/), sums its held
// gradients over it and applies AdamW itself. Per step only the squared norms (for the global clipping) and the
// update's few numbers pass through the coordinator; neither gradients nor adapters do.
//
// The coordinator still decides everything: who is in the groups (the replicas whose slices count this step), the
// clipping factor (from every stage's squared norms, added in name order as every trainer adds them, so the update is
// bitwise the coordinator exchange's for two replicas), the learning rate. It reads the state back (Pull) for every
// checkpoint, validation and sample pass, and loads a replica that was lost and came back (or sat a step out) with the
// state of one that was not (BeforeSlice) before it runs a slice.
//
// Failures: a replica lost during its slice costs nothing (ReplicaSet deals its micro-batches to the others, its
// finished slices too, whose sums were lost with it). One lost after its slice, in the reduction, fails Apply with
// ABORTED: the step starts over on the others (ReplicaSet::RestartStep). One lost in the update is simply out (the
// others applied it). With one replica nobody else holds the state: before each attempt of a step every stage is
// asked for its optimizer's step count (BeforeSlice) when anything reconfigured them since they were last asked, and
// one that lost its state (a restarted worker) takes it back from its host copy (a worker restarted on the same host:
// the step it lost is all it costs), else is loaded with the coordinator's copy when that is current. When it is not
// (the state was lost after the steps since the coordinator last read it back), StateLost() says so and the trainer
// rolls the run back to that copy (RollBack) and redoes the steps since, which compute the same LoRA bit for bit (each
// step is a pure function of the seed, the step and the state). The copy is read back for every checkpoint, validation
// and sample pass.
class PeerExchange : public SliceGuard {
 public:
  using Tensors = std::map<std::string, at::Tensor>;
  // `optimizer`: the AdamW the stages step (the learning rate comes with each Apply); `replicas` must outlive the
  // exchange; `timeout`: forming a group and each collective (a dead peer fails one at once; a silent one after this).
  // `host_copies`: with one replica, each stage keeps a copy of its state in host shared memory, so that a worker
  // restarted on the same host takes it back (stage_worker/host_state_copy.h) and a lost stage costs one step.
  PeerExchange(const OptimizerConfig& optimizer, ReplicaSet* replicas, absl::Duration timeout, bool host_copies = true);
  ~PeerExchange() override;

  // The rendezvous store started and every replica loaded with the run's start state (`master` and the optimizer's).
  absl::Status Start(const Tensors& master, const Optimizer& optimizer) ABSL_LOCKS_EXCLUDED(mu_);
  // Replica r, before its first slice of a step (ReplicaSet::Run's guard): loaded with the current state when it was
  // lost since it last had it; with one replica, before every attempt, its stages asked whether they still hold it.
  absl::Status BeforeSlice(int r) override ABSL_LOCKS_EXCLUDED(mu_);
  // Before a step's first slices, with the replicas that have one (ReplicaSet::StepReplicas): each loaded, and the
  // peer groups formed over exactly them, so each stage sums its gradients as soon as it holds them, hidden behind the
  // upstream stages' last backwards (ReplicaSet::Run's reduce_when_held). False when they could not be (a replica lost
  // meanwhile), or with one replica (it sums with nobody): the step then reduces after its slices, as Apply finds the
  // groups.
  bool BeforeStep(int64_t step, const std::vector<int>& replicas) ABSL_LOCKS_EXCLUDED(mu_);
  // The step's update over `participants` (the replicas whose slices count), with the step's losses (for the
  // non-finite check) and learning rate.
  absl::StatusOr<ExchangeResult> Apply(int64_t step, const std::vector<int>& participants,
                                       const std::vector<double>& losses, double lr) ABSL_LOCKS_EXCLUDED(mu_);
  // The current adapters and optimizer state, from a replica that holds them. DATA_LOSS with StateLost() when none
  // does any more (one replica whose stage restarted since the coordinator's copy was taken).
  absl::Status Pull(Tensors& master, Optimizer& optimizer) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the run's current state is held by no replica (and no longer by the coordinator): a failure with this
  // set is mended by RollBack, not by a retry.
  bool StateLost() ABSL_LOCKS_EXCLUDED(mu_);
  // Every ready replica loaded with the coordinator's copy of the state; the updates since Start that copy holds
  // (the trainer redoes the steps after it).
  absl::StatusOr<int64_t> RollBack() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One replica: every stage's optimizer step count read (JoinGroup, a group of one), and the stages loaded with the
  // coordinator's copy when some lost theirs and the copy is current; else DATA_LOSS and state_lost_.
  absl::Status ProbeSolo() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every stage of the one replica joins a group of one (its optimizer's settings; host copies as host_copies_ says),
  // a stage without the state of `take_host_copy_at` steps (≥ 0) taking it from its host copy when that holds it.
  absl::StatusOr<std::vector<v1::JoinGroupResponse>> JoinSolo(int64_t take_host_copy_at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state of a replica other than `except` that holds the current one (cached until the next update).
  absl::StatusOr<Tensors> CurrentState(int except) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replica r's stages loaded with `state` (each its adapters, their moments and the step count).
  absl::Status LoadReplica(int r, const Tensors& state);
  // Whether replica r holds the run's current state: loaded since it was last lost, and in every update since.
  bool Current(int r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FormGroups(int64_t step, const std::vector<int>& members) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // call(client, rank, stage) on every stage of `members` (member k's stage s at [k * stages_ + s]): each replica's
  // stages at once under its outage watch (StagePipeline::CallEach), the replicas side by side.
  std::vector<absl::Status> CallMembers(const std::vector<int>& members, const std::string& doing,
                                        const std::function<absl::Status(StageClient&, int rank, int stage)>& call);
  // Every stage of `members` joins its new group; per replica, the first failure of its stages (members_ is set only
  // when all joined).
  std::vector<absl::Status> JoinAll(const std::vector<int>& members) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replica r loaded with the current state (BeforeSlice's work, under the lock).
  absl::Status LoadCurrent(int r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replicas whose call failed on their own account (not ABORTED, a peer's fault) are lost; ABORTED for the caller
  // when any call failed.
  absl::Status LoseFailed(int64_t step, const std::vector<int>& replicas, const std::vector<absl::Status>& results,
                          const std::string& what);
  // The reduced gradients' squared norms, per stage by name (every member's must agree); `result` gets the times.
  absl::StatusOr<std::vector<std::map<std::string, double>>> Reduce(int64_t step, const std::vector<int>& members,
                                                                    ExchangeResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prodigy's outcome of the step: every stage's terms of its step-size estimate (an Update with `estimate`, which
  // changes nothing), added by name in the order of one process, then prodigyopt's new scalars from them. A lost
  // replica is taken out as in Reduce.
  absl::StatusOr<ProdigyOutcome> EstimateProdigy(int64_t step, const std::vector<int>& members,
                                                 const v1::UpdateRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replicas that completed their update (a replica that did not is lost: it reloads before its next slice).
  absl::StatusOr<std::vector<int>> Update(int64_t step, const std::vector<int>& members, double lr, double norm)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const OptimizerConfig optimizer_config_;
  const v1::OptimizerSettings settings_;  // the config as JoinGroup sends it
  const std::string job_id_;
  ReplicaSet* replicas_;
  const absl::Duration timeout_;
  const bool host_copies_;
  const int stages_;
  // Held by Start, BeforeSlice, Apply and Pull: one of them at a time (BeforeSlice runs on the replicas' slice
  // threads).
  absl::Mutex mu_;
  std::unique_ptr<RendezvousStore> store_ ABSL_GUARDED_BY(mu_);  // with two or more replicas
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int64_t start_steps_ ABSL_GUARDED_BY(mu_) = 0;  // the optimizer's step count at Start
  bool state_lost_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t probed_generation_ ABSL_GUARDED_BY(mu_) = 0;  // one replica: its pipeline's generation at the last probe
  std::vector<int> loaded_ ABSL_GUARDED_BY(mu_);         // [replica] its Losses() when it was last loaded; -1: never
  std::vector<int64_t> at_update_ ABSL_GUARDED_BY(mu_);  // [replica] updates_ when it last took part or loaded
  std::vector<int> members_ ABSL_GUARDED_BY(mu_);        // the replicas the groups were formed over (empty: none)
  int formations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t updates_ ABSL_GUARDED_BY(mu_) = 0;  // updates applied since Start
  Tensors cache_ ABSL_GUARDED_BY(mu_);        // the state after `cache_updates_` updates (the coordinator's copy)
  int64_t cache_updates_ ABSL_GUARDED_BY(mu_) = -1;
};

// The host of a worker address ("10.0.0.2:7001" → "10.0.0.2", "[::1]:7001" → "::1").
std::string AddressHost(const std::string& address);

}  // namespace baton
