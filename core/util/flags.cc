#include "core/util/flags.h"

#include <absl/flags/reflection.h>
#include <absl/flags/usage_config.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include <algorithm>
#include <deque>

namespace baton {
namespace {

// The source root, from this file's own compile-time path ("<root>/core/util/flags.cc").
absl::string_view SourceRoot() {
  absl::string_view self = __FILE__;
  absl::string_view root = self;
  return absl::ConsumeSuffix(&root, "core/util/flags.cc") ? root : absl::string_view();
}

// Replacement argv strings live as long as the process (argv itself does, and Abseil keeps no copies past
// parsing, but --help and error messages may print them).
char* KeepString(std::string s) {
  static auto* kept = new std::deque<std::string>();
  kept->push_back(std::move(s));
  return kept->back().data();
}

// `name` with hyphens as underscores when that names a defined flag, else `name` unchanged.
std::string CanonicalFlagName(absl::string_view name) {
  std::string underscored(name);
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  if (underscored != name && absl::FindCommandLineFlag(underscored) != nullptr) return underscored;
  return std::string(name);
}

}  // namespace

void NormalizeFlagArgs(int argc, char** argv, std::initializer_list<absl::string_view> optional_value) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    const size_t eq = arg.find('=');
    absl::string_view name = arg.substr(0, eq);
    const absl::string_view rest = eq == absl::string_view::npos ? absl::string_view() : arg.substr(eq);
    std::string canonical = CanonicalFlagName(name);
    bool negated = false;
    if (canonical == name && absl::StartsWith(name, "no") && absl::FindCommandLineFlag(name) == nullptr) {
      std::string positive = CanonicalFlagName(name.substr(2));
      if (positive != name.substr(2) || absl::FindCommandLineFlag(positive) != nullptr) {
        canonical = absl::StrCat("no", positive);
        negated = true;
      }
    }
    // `--NAME VALUE` (the next argument not a flag) is Abseil's own spelling: left as it is.
    const bool value_follows = i + 1 < argc && argv[i + 1][0] != '-';
    for (absl::string_view optional : optional_value) {
      if (!rest.empty() || (value_follows && !negated)) break;
      if (canonical == optional) canonical = absl::StrCat(optional, "=true");
      if (negated && canonical == absl::StrCat("no", optional)) canonical = absl::StrCat(optional, "=false");
    }
    if (canonical != name) argv[i] = KeepString(absl::StrCat("--", canonical, rest));
  }
}

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
