#include "core/device/pinned_host.h"

#ifdef BATON_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#endif

namespace baton {

PinnedHostBytes PinnedHostMemory() {
  PinnedHostBytes out;
#ifdef BATON_WITH_CUDA
  // allocated_bytes counts every block the allocator holds (in use or cached); active_bytes the ones in use.
  const at::HostStats stats = at::getHostAllocator(at::kCUDA)->get_stats();
  out.in_use = stats.active_bytes.current;
  out.cached = stats.allocated_bytes.current - stats.active_bytes.current;
#endif
  return out;
}

bool TrimPinnedHostCache(int64_t budget_bytes) {
#ifdef BATON_WITH_CUDA
  const PinnedHostBytes held = PinnedHostMemory();
  if (held.cached == 0 || held.in_use + held.cached <= budget_bytes) return false;
  at::getHostAllocator(at::kCUDA)->empty_cache();
  return true;
#else
  (void)budget_bytes;
  return false;
#endif
}

}  // namespace baton
