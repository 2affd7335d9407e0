#include "core/util/flags.h"

#include <absl/flags/usage_config.h>
#include <absl/strings/match.h>
#include <absl/strings/strip.h>

namespace baton {
namespace {

// The source root, from this file's own compile-time path ("<root>/core/util/flags.cc").
absl::string_view SourceRoot() {
  absl::string_view self = __FILE__;
  absl::string_view root = self;
  return absl::ConsumeSuffix(&root, "core/util/flags.cc") ? root : absl::string_view();
}

}  // namespace

bool IsBatonFlagFile(absl::string_view filename) { return !absl::StrContains(filename, "absl/"); }

std::string NormalizeFlagFile(absl::string_view filename) {
  absl::string_view root = SourceRoot();
  if (!root.empty()) absl::ConsumePrefix(&filename, root);
  return std::string(filename);
}

void InstallFlagsHelp() {
  // Start from the current config: SetFlagsUsageConfig resets every empty field to Abseil's default (it
  // would drop the --version text InstallVersionFlag set).
  absl::FlagsUsageConfig config = absl::flags_internal::GetUsageConfig();
  config.contains_help_flags = IsBatonFlagFile;
  config.contains_helpshort_flags = IsBatonFlagFile;
  config.normalize_filename = NormalizeFlagFile;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace baton
