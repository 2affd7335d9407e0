#include "core/sample/prompt_embeds.h"

namespace baton {

// Placeholder until prompt encoding lands (issue 12).
absl::StatusOr<std::vector<at::Tensor>> EncodePromptsLocally(const std::string&, const std::vector<std::string>&,
                                                             int64_t, const std::string&) {
  return absl::UnimplementedError("sample prompt encoding is not implemented yet");
}

}  // namespace baton
