#include "encoder_worker/sidecar.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <algorithm>

namespace baton {

absl::StatusOr<std::string> FindSidecar(const std::vector<std::string>& names, const std::string& stem,
                                        const std::vector<std::string>& suffixes, const std::string& owner,
                                        const std::string& what) {
  std::string found;
  for (auto it = std::lower_bound(names.begin(), names.end(), stem); it != names.end() && absl::StartsWith(*it, stem);
       ++it) {
    const std::string suffix = absl::AsciiStrToLower(it->substr(stem.size()));
    if (std::find(suffixes.begin(), suffixes.end(), suffix) == suffixes.end()) continue;
    if (!found.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(owner, " has two ", what, ", ", found, " and ", *it, ": keep one"));
    }
    found = *it;
  }
  return found;
}

}  // namespace baton
