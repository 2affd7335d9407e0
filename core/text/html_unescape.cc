#include "core/text/html_unescape.h"

#include <algorithm>
#include <cstring>

#include "core/text/utf8.h"

namespace baton {
namespace {

const char* FindEntity(absl::string_view name) {
  const HtmlEntity* end = kHtmlEntities + kHtmlEntitiesSize;
  const HtmlEntity* it = std::lower_bound(
      kHtmlEntities, end, name, [](const HtmlEntity& e, absl::string_view n) { return absl::string_view(e.name) < n; });
  return it != end && absl::string_view(it->name) == name ? it->value : nullptr;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A numeric reference's replacement (html._replace_charref); `digits` are all decimal or all hex.
std::string NumericCharref(absl::string_view digits, int base) {
  uint64_t num = 0;
  bool huge = false;
  for (char c : digits) {
    const int v = IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
    num = num * base + v;
    if (num > 0x10FFFF) huge = true, num = 0x110000;  // saturate: anything past U+10FFFF reads the same
  }
  if (!huge) {
    const HtmlCharref* end = kHtmlInvalidCharrefs + kHtmlInvalidCharrefsSize;
    const HtmlCharref* it = std::lower_bound(kHtmlInvalidCharrefs, end, static_cast<uint32_t>(num),
                                             [](const HtmlCharref& r, uint32_t n) { return r.number < n; });
    if (it != end && it->number == num) return it->value;
  }
  if (huge || (num >= 0xD800 && num <= 0xDFFF)) return "\xEF\xBF\xBD";  // U+FFFD
  if (std::binary_search(kHtmlInvalidCodepoints, kHtmlInvalidCodepoints + kHtmlInvalidCodepointsSize,
                         static_cast<uint32_t>(num))) {
    return "";
  }
  std::string out;
  AppendUtf8(static_cast<uint32_t>(num), &out);
  return out;
}

// Tries the reference at text[i] == '&'; on a match appends its replacement and returns the bytes consumed.
size_t Charref(absl::string_view text, size_t i, std::string* out) {
  size_t j = i + 1;
  if (j < text.size() && text[j] == '#') {
    const bool hex = j + 1 < text.size() && (text[j + 1] == 'x' || text[j + 1] == 'X');
    size_t k = j + (hex ? 2 : 1);
    const size_t digits_start = k;
    while (k < text.size() && (hex ? IsHex(text[k]) : IsDigit(text[k]))) ++k;
    if (k == digits_start) return 0;
    out->append(NumericCharref(text.substr(digits_start, k - digits_start), hex ? 16 : 10));
    if (k < text.size() && text[k] == ';') ++k;
    return k - i;
  }
  // [^\t\n\f <&#;]{1,32};? counted in code points.
  size_t k = j;
  for (int chars = 0; chars < 32 && k < text.size(); ++chars) {
    const char c = text[k];
    if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';') break;
    k += DecodeUtf8At(text, k).length;
  }
  if (k == j) return 0;
  if (k < text.size() && text[k] == ';') ++k;
  const absl::string_view name = text.substr(j, k - j);
  if (const char* value = FindEntity(name)) {
    out->append(value);
    return k - i;
  }
  for (size_t x = name.size() - 1; x >= 2; --x) {  // the longest known prefix (ASCII names: bytes = chars)
    if (const char* value = FindEntity(name.substr(0, x))) {
      out->append(value);
      out->append(name.data() + x, name.size() - x);
      return k - i;
    }
  }
  out->push_back('&');
  out->append(name.data(), name.size());
  return k - i;
}

}  // namespace

std::string HtmlUnescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '&') {
      const size_t used = Charref(text, i, &out);
      if (used > 0) {
        i += used;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

}  // namespace baton
