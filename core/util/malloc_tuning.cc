#include "core/util/malloc_tuning.h"

#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace baton {

void TuneMallocForTensors() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    // Fixed values also switch off glibc's dynamic threshold, which otherwise re-learns (and trims) per size.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
#endif
}

}  // namespace baton
