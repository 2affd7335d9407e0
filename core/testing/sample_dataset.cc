#include "core/testing/sample_dataset.h"

#include <absl/strings/str_cat.h>

#include <filesystem>

#include "core/testing/paths.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton::test_util {

absl::StatusOr<std::vector<std::string>> WriteSampleCopies(const std::string& dir, int copies) {
  namespace fs = std::filesystem;
  RETURN_IF_ERROR(MakeDirs(dir));
  const std::string sample = JoinPath(SourceDir(), "data/sample");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(sample)) {
    if (entry.path().extension() != ".png") continue;
    const std::string stem = entry.path().stem().string();
    ASSIGN_OR_RETURN(std::string caption, ReadFile(JoinPath(sample, stem + ".txt")));
    for (int copy = 0; copy < copies; ++copy) {
      const std::string name = absl::StrCat(stem, "_", copy);
      std::error_code ec;
      fs::copy_file(entry.path(), JoinPath(dir, name + ".png"), ec);
      if (ec) return absl::InternalError(absl::StrCat("copying ", entry.path().string(), ": ", ec.message()));
      RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, name + ".txt"), absl::StrCat(caption, ", take ", copy)));
      names.push_back(name + ".png");
    }
  }
  return names;
}

}  // namespace baton::test_util
