#include "core/device/allocator_settings.h"

#include <cstdlib>

namespace baton {

const char* PreferExpandableSegments() {
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
  return std::getenv("PYTORCH_CUDA_ALLOC_CONF");
}

}  // namespace baton
