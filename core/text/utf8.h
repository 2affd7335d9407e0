// UTF-8 code points: the one strict decoder and encoder that the tokenizer, its pre-tokenizer and the NFC
// normalizer share. Strict means overlong forms, surrogates and values past U+10FFFF are invalid; what a
// caller does with an invalid byte (U+FFFD, pass it through raw) is its own choice.
#pragma once

#include <absl/strings/string_view.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace baton {

struct Utf8Step {
  uint32_t cp = 0;    // the code point (meaningless when !valid)
  size_t length = 1;  // bytes consumed: the sequence's length, or 1 for an invalid byte
  bool valid = false;
};

// The code point that starts at byte `i` of `text` (i < text.size()).
inline Utf8Step DecodeUtf8At(absl::string_view text, size_t i) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b = s[i];
  if (b < 0x80) return {b, 1, true};
  size_t need = 0;
  uint32_t cp = 0, min = 0;
  if ((b & 0xE0) == 0xC0) {
    need = 1, cp = b & 0x1F, min = 0x80;
  } else if ((b & 0xF0) == 0xE0) {
    need = 2, cp = b & 0x0F, min = 0x800;
  } else if ((b & 0xF8) == 0xF0) {
    need = 3, cp = b & 0x07, min = 0x10000;
  } else {
    return {};
  }
  if (i + need >= n) return {};
  for (size_t k = 1; k <= need; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, need + 1, true};
}

// True when all of `text` is strict UTF-8.
inline bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Step step = DecodeUtf8At(text, i);
    if (!step.valid) return false;
    i += step.length;
  }
  return true;
}

// Appends the UTF-8 bytes of `cp` (≤ U+10FFFF) to `out`.
inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace baton
