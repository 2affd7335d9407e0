#include "encoder_worker/references.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/data/cache.h"

namespace baton {
namespace {

bool IsReferenceImageExtension(const std::string& extension) {
  const std::string lower = absl::AsciiStrToLower(extension);
  return lower == ".png" || lower == ".jpg" || lower == ".jpeg";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FindReferenceFiles(const std::string& image_name,
                                                            const std::vector<std::string>& control_names) {
  const std::string stem = std::filesystem::path(image_name).stem().string();
  std::vector<std::string> single;
  std::map<int64_t, std::vector<std::string>> numbered;
  // Every candidate starts with the stem: cat.png, cat_0.png, cat_12.jpg.
  for (auto it = std::lower_bound(control_names.begin(), control_names.end(), stem);
       it != control_names.end() && absl::StartsWith(*it, stem); ++it) {
    const std::filesystem::path path(*it);
    if (!IsReferenceImageExtension(path.extension().string())) continue;
    const std::string rest = path.stem().string().substr(stem.size());
    int64_t number = 0;
    if (rest.empty()) {
      single.push_back(*it);
    } else if (rest.size() > 1 && rest[0] == '_' &&
               std::all_of(rest.begin() + 1, rest.end(), [](char c) { return absl::ascii_isdigit(c); }) &&
               absl::SimpleAtoi(rest.substr(1), &number)) {
      numbered[number].push_back(*it);
    }
  }
  std::vector<std::string> out;
  for (const auto& [number, files] : numbered) {
    if (files.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(image_name, ": reference ", number, " is ", absl::StrJoin(files, " and "), ": keep one"));
    }
    out.push_back(files[0]);
  }
  if (single.size() > 1 || (!single.empty() && !out.empty())) {
    single.insert(single.end(), out.begin(), out.end());
    return absl::InvalidArgumentError(absl::StrCat(image_name, ": the control folder holds ",
                                                   absl::StrJoin(single, ", "),
                                                   ": name one reference NAME.png, or several NAME_0.png, NAME_1.png"));
  }
  if (!single.empty()) return single;
  if (static_cast<int64_t>(out.size()) > kMaxReferences) {
    return absl::InvalidArgumentError(absl::StrCat(image_name, ": ", out.size(), " reference images (",
                                                   absl::StrJoin(out, ", "), "); at most ", kMaxReferences));
  }
  return out;
}

}  // namespace baton
