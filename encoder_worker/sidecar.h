// Files that go with a sample by name (a mask, a clip's first-frame image): the sample's stem, spelled exactly, and a
// suffix matched in any case, as the scans classify files ("walk.PNG", "cat.Mask.png").
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <vector>

namespace baton {

// The one name of `names` (a folder's listing, sorted) that is `stem` + one of `suffixes` (lower case, e.g.
// ".mask.png") in any case: "" when none; INVALID_ARGUMENT "<owner> has two <what>, A and B: keep one" when two are.
absl::StatusOr<std::string> FindSidecar(const std::vector<std::string>& names, const std::string& stem,
                                        const std::vector<std::string>& suffixes, const std::string& owner,
                                        const std::string& what);

}  // namespace baton
