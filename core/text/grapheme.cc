#include "core/text/grapheme.h"

#include <algorithm>

#include "core/text/utf8.h"

namespace baton {
namespace {

bool InTable(const GraphemeRange* table, size_t size, uint32_t cp) {
  const GraphemeRange* end = table + size;
  const GraphemeRange* it =
      std::upper_bound(table, end, cp, [](uint32_t v, const GraphemeRange& r) { return v < r.lo; });
  return it != table && cp <= (it - 1)->hi;
}

enum class Kind { kOther, kExtend, kPrepend, kControl, kCr, kLf };

Kind KindOf(uint32_t cp) {
  if (cp == '\r') return Kind::kCr;
  if (cp == '\n') return Kind::kLf;
  if (InTable(kGraphemeControl, kGraphemeControlSize, cp)) return Kind::kControl;
  if (InTable(kGraphemeExtend, kGraphemeExtendSize, cp)) return Kind::kExtend;
  if (InTable(kGraphemePrepend, kGraphemePrependSize, cp)) return Kind::kPrepend;
  return Kind::kOther;
}

bool IsControl(Kind k) { return k == Kind::kControl || k == Kind::kCr || k == Kind::kLf; }

// Whether a cluster boundary lies between characters of kinds `a` and `b`.
bool Breaks(Kind a, Kind b) {
  if (a == Kind::kCr && b == Kind::kLf) return false;  // GB3
  if (IsControl(a) || IsControl(b)) return true;       // GB4, GB5
  if (b == Kind::kExtend) return false;                // GB9, GB9a
  if (a == Kind::kPrepend) return false;               // GB9b
  return true;                                         // GB999 (and the rules this file leaves out)
}

}  // namespace

std::vector<absl::string_view> SplitGraphemes(absl::string_view text) {
  std::vector<absl::string_view> out;
  size_t start = 0;
  Kind prev = Kind::kOther;
  for (size_t i = 0; i < text.size();) {
    const Utf8Step step = DecodeUtf8At(text, i);
    const Kind kind = step.valid ? KindOf(step.cp) : Kind::kControl;
    if (i > 0 && Breaks(prev, kind)) {
      out.push_back(text.substr(start, i - start));
      start = i;
    }
    prev = kind;
    i += step.length;
  }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

}  // namespace baton
