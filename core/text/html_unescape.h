// Python's html.unescape, exactly: named character references from the HTML5 table (with and without ';',
// and the longest known prefix of an unknown name), decimal and hex numeric references with the HTML5
// replacements of invalid ones (0x80-0x9F as windows-1252, surrogates and > U+10FFFF as U+FFFD, other
// invalid code points removed). diffusers' Wan prompt_clean applies it twice. Tables from
// scripts/gen_html_entities.py.
#pragma once

#include <absl/strings/string_view.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace baton {

struct HtmlEntity {
  const char* name;   // e.g. "amp;" or "amp"
  const char* value;  // UTF-8
};
struct HtmlCharref {
  uint32_t number;
  const char* value;
};
extern const HtmlEntity kHtmlEntities[];  // sorted by name (bytewise)
extern const size_t kHtmlEntitiesSize;
extern const HtmlCharref kHtmlInvalidCharrefs[];  // sorted by number
extern const size_t kHtmlInvalidCharrefsSize;
extern const uint32_t kHtmlInvalidCodepoints[];  // sorted
extern const size_t kHtmlInvalidCodepointsSize;

// `text` must be valid UTF-8 (invalid bytes are passed through).
std::string HtmlUnescape(absl::string_view text);

}  // namespace baton
