// sentencepiece's precompiled normalization map (the `precompiled_charsmap` of a Hugging Face tokenizer.json
// "Precompiled" normalizer, or of spiece.model's normalizer_spec), applied as Hugging Face tokenizers does
// (its spm_precompiled crate): the blob is a little-endian u32 trie size, a darts-clone double-array trie of
// that many bytes, then NUL-terminated replacement strings the trie's values index. Text is walked by
// grapheme cluster: a cluster shorter than 6 bytes whose bytes start with a key (the SHORTEST matching key
// wins, and it replaces the whole cluster) is replaced; otherwise each character is looked up alone.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace baton {

class PrecompiledCharsmap {
 public:
  // `blob`: the raw bytes (base64-decoded). Errors name `source`.
  static absl::StatusOr<PrecompiledCharsmap> FromBytes(absl::string_view blob, absl::string_view source);
  static absl::StatusOr<PrecompiledCharsmap> FromBase64(absl::string_view base64, absl::string_view source);

  // The replacement of the shortest key that prefixes `chunk`, or nullopt.
  std::optional<absl::string_view> Transform(absl::string_view chunk) const;
  // The whole normalizer over valid UTF-8 `text`.
  std::string Normalize(absl::string_view text) const;

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
};

}  // namespace baton
