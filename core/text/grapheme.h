// Extended grapheme clusters, as far as the Precompiled normalizer (precompiled_charsmap.h) needs them: it
// looks a cluster of fewer than 6 bytes up whole, so only how combining marks, ZWJ, spacing marks, prepend
// characters and CR LF join a character matters (UAX #29 GB3-GB5, GB9, GB9a, GB9b). Hangul syllable
// sequences, regional-indicator pairs and emoji ZWJ sequences (GB6-8, GB11-13) are split here, which gives the
// same normalization: each of those clusters is at least 6 bytes long, so it is normalized per character.
// Tables from scripts/gen_grapheme_data.py.
#pragma once

#include <absl/strings/string_view.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace baton {

struct GraphemeRange {
  uint32_t lo, hi;
};
extern const GraphemeRange kGraphemeExtend[];
extern const size_t kGraphemeExtendSize;
extern const GraphemeRange kGraphemePrepend[];
extern const size_t kGraphemePrependSize;
extern const GraphemeRange kGraphemeControl[];
extern const size_t kGraphemeControlSize;

// Splits valid UTF-8 `text` into clusters (views into it), in order.
std::vector<absl::string_view> SplitGraphemes(absl::string_view text);

}  // namespace baton
