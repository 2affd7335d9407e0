#include "stage_driver/driver_options.h"

#include <absl/strings/str_cat.h>

namespace baton {

absl::Status CheckStageDriverOptions(const StageDriverOptions& options) {
  if (options.stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  if (options.replicas < 1) return absl::InvalidArgumentError("--replicas must be ≥ 1");
  const int workers = options.stages * options.replicas;
  if (!options.workers.empty() && static_cast<int>(options.workers.size()) != workers) {
    if (options.replicas == 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers lists ", options.workers.size(), " addresses for ", options.stages, " stages"));
    }
    return absl::InvalidArgumentError(absl::StrCat("--workers lists ", options.workers.size(), " addresses for ",
                                                   options.replicas, " replicas of ", options.stages, " stages (",
                                                   workers, ": replica 0's stages first, then replica 1's, ...)"));
  }
  return absl::OkStatus();
}

}  // namespace baton
