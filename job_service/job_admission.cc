#include "job_service/job_admission.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <algorithm>

#include "coordinator/job_plan.h"
#include "core/pipeline/partition.h"
#include "job_service/job_queue.h"

namespace baton {

std::string PlannedFrozenKey(const JobConfig& job, int stages) {
  std::string key;
  return CheckJobPlan(job, stages, &key).ok() ? key : "";
}

namespace {

// Whether the job's stage workers may hold other jobs beside it: one replica (the job's, and the service's
// --replicas, 0 meaning the job's), one expert.
bool Shareable(const JobConfig& job, int service_replicas) {
  return job.replicas == 1 && job.replica_stages.empty() && service_replicas <= 1 && job.expert != "both";
}

// The job's memory budget of stage s in bytes (0: none).
int64_t BudgetBytes(const JobConfig& job, size_t s) {
  if (job.memory_per_stage.empty()) return 0;
  const std::string& text = job.memory_per_stage.size() == 1 ? job.memory_per_stage[0] : job.memory_per_stage[s];
  return ParseByteSize(text).value_or(0);
}

}  // namespace

std::string JobQueue::JoinBlockerLocked(const Job& next) const {
  const Job& first = jobs_.at(*running_.begin());
  const std::string running = absl::StrCat(running_.size() > 1 ? "jobs " : "job ", absl::StrJoin(running_, ", "));
  if (!Shareable(next.config, base_.replicas) || !Shareable(first.config, base_.replicas)) {
    return absl::StrCat(running, " (replicas and both experts run alone)");
  }
  if (running_.size() >= kMaxSweepMembers) return absl::StrCat(kMaxSweepMembers, " jobs already share the stages");
  if (next.frozen_key.empty()) {
    return absl::StrCat(running, " (its cut is known only once its dataset is encoded: it runs alone)");
  }
  if (next.frozen_key != first.frozen_key) {  // the weights the workers hold, as they would key them
    return absl::StrCat(running, " (another model, precision or cut on the stage workers)");
  }
  // Memory: the frozen stage once, every running job's share, and the newcomer's (as large as the largest running
  // one's: the same model; its own plan exists only once it starts), within the smallest budget any of them sets.
  const size_t stages = first.planned_bytes.size();
  for (int64_t id : running_) {
    const Job& job = jobs_.at(id);
    if (job.planned_bytes.empty() || job.planned_bytes.size() != stages) {
      return absl::StrCat("job ", id, " to start (its memory plan)");
    }
  }
  for (size_t s = 0; s < stages; ++s) {
    int64_t budget = BudgetBytes(next.config, s), need = first.planned_bytes[s] - first.member_bytes[s], largest = 0;
    for (int64_t id : running_) {
      const Job& job = jobs_.at(id);
      const int64_t b = BudgetBytes(job.config, s);
      if (b > 0) budget = budget > 0 ? std::min(budget, b) : b;
      need += job.member_bytes[s];
      largest = std::max(largest, job.member_bytes[s]);
    }
    if (budget > 0 && need + largest > budget) {
      return absl::StrCat(running, " (stage ", s, " would need ", FormatByteSize(need + largest),
                          " with this job, over its memory budget of ", FormatByteSize(budget), ")");
    }
  }
  return "";
}

}  // namespace baton
