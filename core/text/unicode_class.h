// Unicode character classes for the hand-written pre-tokenizer regexes (see pre_tokenizer.h).
// The HF tokenizers regexes use \p{L}, \p{Lu}, \p{N}, \s...; std::regex cannot, so each code point
// is classified once: ASCII by a fast path, the rest by a range table generated from the Unicode
// 14.0 general categories (Python's unicodedata) and White_Space property. Exact for Unicode 14.0;
// characters assigned later than 14.0 classify as kOther.
#pragma once

#include <cstdint>

namespace baton {

enum class CharClass : uint8_t {
  kOther = 0,        // punctuation, symbols, controls, unassigned
  kUpper = 1,        // Lu, Lt
  kLower = 2,        // Ll
  kOtherLetter = 3,  // Lm, Lo (e.g. CJK ideographs, kana)
  kMark = 4,         // Mn, Mc, Me (not \p{L})
  kNumber = 5,       // Nd, Nl, No
  kSpace = 6,        // White_Space (\s)
};

CharClass ClassifyCodePoint(uint32_t cp);

inline bool IsLetterClass(CharClass c) {
  return c == CharClass::kUpper || c == CharClass::kLower || c == CharClass::kOtherLetter;
}

}  // namespace baton
