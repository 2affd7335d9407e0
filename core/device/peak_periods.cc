#include "core/device/peak_periods.h"

#include <algorithm>

namespace baton {

int64_t PeakPeriods::Take(uint64_t owner, int64_t peak, int64_t current) {
  for (auto& [o, highest] : open_) highest = std::max(highest, peak);
  auto it = open_.find(owner);
  const int64_t result = it == open_.end() ? peak : it->second;
  open_[owner] = current;
  return result;
}

void PeakPeriods::Forget(uint64_t owner) { open_.erase(owner); }

}  // namespace baton
