// A sweep: one job file, several LoRAs. `sweep:` lists values for any of optimizer.lr, lora.rank, lora.alpha, seed and
// dataset; every combination (in file order, the last key changing fastest) is a member, a job of its own under
// OUTPUT/<member>/ named by its values, and all of them train at once over the same stage workers
// (coordinator/sweep_runs.h): the frozen model is loaded once and one member's pipeline bubble is another's work.
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <vector>

#include "core/train/job.h"

namespace baton {

// The keys `sweep:` accepts.
std::vector<std::string> SweepKeys();
// At most this many members (the product of the lists' lengths): each holds its adapters, optimizer and inbox on
// every stage worker.
inline constexpr size_t kMaxSweepMembers = 16;

struct SweepMember {
  std::string name;  // "lr=1e-4_rank=8": its folder under the output, and its JobConfig::sweep_member
  JobConfig job;     // the job with the member's values (no sweep left; named <job>.<member>)
};

// The members of `job` (one, the job itself with an empty name, when it has no sweep). Errors: a value that does not
// parse or is out of range, too many members, two members with the same name.
absl::StatusOr<std::vector<SweepMember>> ExpandSweep(const JobConfig& job);

}  // namespace baton
