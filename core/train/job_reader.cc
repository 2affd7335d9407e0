#include "core/train/job_reader.h"

namespace baton {

std::string Where(const std::string& source, const YAML::Node& node) {
  if (node.Mark().is_null()) return source;
  return absl::StrCat(source, ":", node.Mark().line + 1);
}

}  // namespace baton
