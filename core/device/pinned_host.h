// Page-locked ("pinned") host memory held by libtorch's CUDA host allocator: what it holds, and a trim.
// The allocator caches every freed block for reuse, so without a trim its footprint is the largest set of
// pinned tensors ever alive at once (wire buffers, downloads), outside any budget. A stage worker trims the
// cache after each step when it holds more than the worker's pinned budget (stage_runner.cc), and the metrics
// report both figures (baton_pinned_host_memory_bytes). Builds without CUDA hold none.
#pragma once

#include <cstdint>

namespace baton {

struct PinnedHostBytes {
  int64_t in_use = 0;  // bytes of live pinned tensors
  int64_t cached = 0;  // freed blocks kept for reuse
};

// What the allocator holds now (zeros without CUDA). Never initializes CUDA; thread-safe.
PinnedHostBytes PinnedHostMemory();

// Returns the cached blocks to the system when in_use + cached exceeds `budget_bytes`; true when it trimmed.
bool TrimPinnedHostCache(int64_t budget_bytes);

}  // namespace baton
