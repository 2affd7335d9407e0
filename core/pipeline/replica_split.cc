#include "core/pipeline/replica_split.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>

namespace baton {

std::vector<int> SplitBySpeed(int micro_batches, const std::vector<double>& seconds_per_micro_batch) {
  const int replicas = static_cast<int>(seconds_per_micro_batch.size());
  double measured_sum = 0;
  int measured = 0;
  for (double s : seconds_per_micro_batch) {
    if (s > 0) {
      measured_sum += s;
      ++measured;
    }
  }
  const double fallback = measured > 0 ? measured_sum / measured : 1.0;
  std::vector<double> cost(replicas);
  for (int r = 0; r < replicas; ++r) cost[r] = seconds_per_micro_batch[r] > 0 ? seconds_per_micro_batch[r] : fallback;
  std::vector<int> split(replicas, 0);
  for (int i = 0; i < micro_batches; ++i) {
    int best = 0;
    for (int r = 1; r < replicas; ++r) {
      if ((split[r] + 1) * cost[r] < (split[best] + 1) * cost[best]) best = r;
    }
    ++split[best];
  }
  return split;
}

std::vector<int> SplitEvenly(int micro_batches, int replicas) {
  std::vector<int> split(replicas, micro_batches / replicas);
  for (int r = 0; r < micro_batches % replicas; ++r) ++split[r];
  return split;
}

std::vector<int> FirstMicroBatches(const std::vector<int>& split) {
  std::vector<int> first(split.size(), 0);
  for (size_t r = 1; r < split.size(); ++r) first[r] = first[r - 1] + split[r - 1];
  return first;
}

void ReplicaSpeeds::Record(int replica, int micro_batches, double seconds) {
  if (micro_batches <= 0 || seconds <= 0) return;
  const double now = seconds / micro_batches;
  double& s = seconds_[replica];
  s = s > 0 ? (1 - weight_) * s + weight_ * now : now;
}

bool UnequalStageCounts(const std::vector<int>& replica_stages) {
  return std::adjacent_find(replica_stages.begin(), replica_stages.end(), std::not_equal_to<int>()) !=
         replica_stages.end();
}

std::string RenderReplicaLoad(const Plan& plan, const std::vector<int>& replica_stages, bool allreduce) {
  int64_t lora_params = 0;
  for (const StageSpec& s : plan.stages) lora_params += s.lora_params;
  const int replicas = static_cast<int>(replica_stages.size());
  const int workers = std::accumulate(replica_stages.begin(), replica_stages.end(), 0);
  const bool unequal = UnequalStageCounts(replica_stages);
  const std::string shape =
      unequal ? absl::StrCat(replicas, " of ", absl::StrJoin(replica_stages, "+"), " stages (", workers, " workers)")
              : absl::StrCat(replicas, " copies of this plan (", workers, " workers)");
  const double replica_bytes = 4.0 * static_cast<double>(lora_params);  // fp32, each way, however it is staged
  const double link_bytes = replica_bytes * replicas;
  if (allreduce) {
    // Gloo's ring allreduce: each member sends and receives 2 (R - 1) / R of the buffer.
    int64_t busiest = 0;
    for (const StageSpec& s : plan.stages) busiest = std::max(busiest, s.lora_params);
    const double stage_bytes = 4.0 * static_cast<double>(busiest) * 2.0 * (replicas - 1) / replicas;
    return absl::StrFormat(
        "replicas: %s; replica_exchange: allreduce: each step stage s of every replica sums its fp32 LoRA gradients "
        "with the others' (ring allreduce) and steps AdamW itself; the busiest stage's link carries %.1f MB each way "
        "per step (%.2f s at 1 Gbit/s, %.3f s at 10 Gbit/s), the coordinator's nothing but a checkpoint's read\n",
        shape, stage_bytes / 1e6, stage_bytes * 8 / 1e9, stage_bytes * 8 / 1e10);
  }
  return absl::StrFormat(
      "replicas: %s; each step every replica's stages send %.1f MB of fp32 LoRA gradients to the coordinator and "
      "get %.1f MB of adapters back: the coordinator's link carries %.1f MB each way per step (%.2f s at 1 Gbit/s, "
      "%.3f s at 10 Gbit/s)\n",
      shape, replica_bytes / 1e6, replica_bytes / 1e6, link_bytes / 1e6, link_bytes * 8 / 1e9, link_bytes * 8 / 1e10);
}

}  // namespace baton
