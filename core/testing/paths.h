// Where tests find the source tree (configs/, data/) and the built binaries (stage_worker, coordinator, ...).
// BATON_SOURCE_DIR / BATON_BIN_DIR in the environment override the paths of the build that compiled the test.
#pragma once

#include <cstdlib>
#include <string>

#include "core/testing/build_paths.h"

namespace baton::test_util {

inline std::string SourceDir() {
  const char* env = std::getenv("BATON_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : BATON_BUILD_SOURCE_DIR;
}

inline std::string BinDir() {
  const char* env = std::getenv("BATON_BIN_DIR");
  return env != nullptr && *env != '\0' ? env : BATON_BUILD_BIN_DIR;
}

}  // namespace baton::test_util
