// How a step's micro-batches are dealt out to data-parallel replicas of the pipeline (coordinator/replica_set.h),
// and how each replica's speed is measured for the next deal. Pure functions of their inputs: a split is decided
// once per step and logged, and a given split trains bitwise the same LoRA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/pipeline/partition.h"

namespace baton {

// Micro-batches per replica, summing to `micro_batches`, each replica's slice contiguous in replica order.
// `seconds_per_micro_batch[r]` ≤ 0 means not measured yet: it counts as the mean of the measured ones (all
// unmeasured: equal). Greedy earliest finish: each micro-batch in turn goes to the replica that would finish it
// first ((count + 1) · seconds; ties to the lower index), which minimises the slowest replica's time for
// micro-batches of equal cost. A replica slow enough may get none.
std::vector<int> SplitBySpeed(int micro_batches, const std::vector<double>& seconds_per_micro_batch);

// `micro_batches` as evenly as possible, the first replicas taking one more.
std::vector<int> SplitEvenly(int micro_batches, int replicas);

// The step-wide index of each replica's first micro-batch (prefix sums of `split`).
std::vector<int> FirstMicroBatches(const std::vector<int>& split);

// Each replica's seconds per micro-batch, smoothed over steps (exponential average, new measurements weighing
// `weight`); a replica that ran no micro-batch keeps its estimate.
class ReplicaSpeeds {
 public:
  explicit ReplicaSpeeds(int replicas, double weight = 0.5) : seconds_(replicas, 0.0), weight_(weight) {}
  void Record(int replica, int micro_batches, double seconds);
  const std::vector<double>& seconds_per_micro_batch() const { return seconds_; }

 private:
  std::vector<double> seconds_;  // ≤ 0: not measured yet
  double weight_;
};

// What `baton plan --replicas R` (or --replica-stages) adds under the plan: the replicas' shape, and the LoRA exchange
// each step puts on the coordinator's link (every replica's fp32 gradients in, the new fp32 adapters out; the same
// bytes however a replica is staged), with its time at 1 and 10 Gbit/s.
std::string RenderReplicaLoad(const Plan& plan, const std::vector<int>& replica_stages, bool allreduce = false);

// Whether replicas of these stage counts differ (each then needs a plan and schedules of its own; they have no
// matching stages to sum gradients over).
bool UnequalStageCounts(const std::vector<int>& replica_stages);

}  // namespace baton
