#include "stage_driver/driver_options.h"

#include <absl/strings/str_cat.h>

namespace baton {

absl::Status CheckStageDriverOptions(const StageDriverOptions& options) {
  if (options.stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  if (!options.workers.empty() && static_cast<int>(options.workers.size()) != options.stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers lists ", options.workers.size(), " addresses for ", options.stages, " stages"));
  }
  return absl::OkStatus();
}

}  // namespace baton
