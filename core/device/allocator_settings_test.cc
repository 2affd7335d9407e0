#include "core/device/allocator_settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace baton {
namespace {

TEST(AllocatorSettingsTest, ExpandableSegmentsUnlessTheUserChoseOtherwise) {
  const char* before = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  const std::string saved = before ? before : "";
  ::unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_STREQ(PreferExpandableSegments(), "expandable_segments:True");
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128", 1);
  EXPECT_STREQ(PreferExpandableSegments(), "max_split_size_mb:128") << "the user's setting is kept whole";
  if (before) {
    ::setenv("PYTORCH_CUDA_ALLOC_CONF", saved.c_str(), 1);
  } else {
    ::unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  }
}

}  // namespace
}  // namespace baton
