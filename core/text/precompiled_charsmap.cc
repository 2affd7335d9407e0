#include "core/text/precompiled_charsmap.h"

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

#include <cstring>

#include "core/text/grapheme.h"
#include "core/text/utf8.h"

namespace baton {
namespace {

// darts-clone unit fields.
bool HasLeaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
uint32_t Value(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t Label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
size_t Offset(uint32_t u) { return static_cast<size_t>((u >> 10) << ((u & (1u << 9)) >> 6)); }

}  // namespace

absl::StatusOr<PrecompiledCharsmap> PrecompiledCharsmap::FromBytes(absl::string_view blob, absl::string_view source) {
  if (blob.size() < 4) return absl::InvalidArgumentError(absl::StrCat(source, ": precompiled_charsmap too short"));
  uint32_t trie_size = 0;
  for (int i = 3; i >= 0; --i) trie_size = (trie_size << 8) | static_cast<uint8_t>(blob[i]);
  if (trie_size % 4 != 0 || trie_size == 0 || 4 + static_cast<size_t>(trie_size) > blob.size()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": precompiled_charsmap trie size ", trie_size,
                                                   " does not fit its ", blob.size(), " bytes"));
  }
  PrecompiledCharsmap map;
  map.units_.resize(trie_size / 4);
  for (size_t i = 0; i < map.units_.size(); ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(blob.data()) + 4 + 4 * i;
    map.units_[i] = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
  map.normalized_ = std::string(blob.substr(4 + trie_size));
  return map;
}

absl::StatusOr<PrecompiledCharsmap> PrecompiledCharsmap::FromBase64(absl::string_view base64,
                                                                    absl::string_view source) {
  std::string bytes;
  if (!absl::Base64Unescape(base64, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": precompiled_charsmap is not base64"));
  }
  return FromBytes(bytes, source);
}

std::optional<absl::string_view> PrecompiledCharsmap::Transform(absl::string_view chunk) const {
  size_t pos = 0;
  auto at = [&](size_t i) -> std::optional<uint32_t> {
    if (i >= units_.size()) return std::nullopt;
    return units_[i];
  };
  std::optional<uint32_t> unit = at(pos);
  if (!unit) return std::nullopt;
  pos ^= Offset(*unit);
  for (char ch : chunk) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == 0) break;
    pos ^= c;
    unit = at(pos);
    if (!unit || Label(*unit) != c) return std::nullopt;
    pos ^= Offset(*unit);
    if (HasLeaf(*unit)) {
      std::optional<uint32_t> leaf = at(pos);
      if (!leaf) return std::nullopt;
      const size_t begin = Value(*leaf);
      if (begin >= normalized_.size()) return std::nullopt;
      const size_t end = normalized_.find('\0', begin);
      return absl::string_view(normalized_)
          .substr(begin, (end == std::string::npos ? normalized_.size() : end) - begin);
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsmap::Normalize(absl::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for (absl::string_view cluster : SplitGraphemes(text)) {
    if (cluster.size() < 6) {
      if (auto norm = Transform(cluster)) {
        out.append(norm->data(), norm->size());
        continue;
      }
    }
    for (size_t i = 0; i < cluster.size();) {
      const size_t len = DecodeUtf8At(cluster, i).length;
      absl::string_view part = cluster.substr(i, len);
      if (auto norm = Transform(part)) {
        out.append(norm->data(), norm->size());
      } else {
        out.append(part.data(), part.size());
      }
      i += len;
    }
  }
  return out;
}

}  // namespace baton
