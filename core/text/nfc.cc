#include "core/text/nfc.h"

#include <algorithm>
#include <vector>

#include "core/text/unicode_nfc_data.h"
#include "core/text/utf8.h"

namespace baton {
namespace {

// Hangul syllable arithmetic (Unicode §3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid byte b travels as kRawByte + b: a starter that composes with nothing.
constexpr uint32_t kRawByte = 0x110000;

void DecodeUtf8(absl::string_view text, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Step step = DecodeUtf8At(text, i);
    out->push_back(step.valid ? step.cp : kRawByte + static_cast<uint8_t>(text[i]));
    i += step.length;
  }
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp >= kRawByte) {
    out->push_back(static_cast<char>(cp - kRawByte));
  } else {
    AppendUtf8(cp, out);
  }
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0 && cp < kRawByte) {
    const Decomposition* end = kDecompositions + kDecompositionsSize;
    const Decomposition* it =
        std::lower_bound(kDecompositions, end, cp, [](const Decomposition& d, uint32_t c) { return d.cp < c; });
    if (it != end && it->cp == cp) {
      out->insert(out->end(), kDecompositionPool + it->offset, kDecompositionPool + it->offset + it->length);
      return;
    }
  }
  out->push_back(cp);
}

// The primary composite of (a, b), or 0 when they do not compose.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kCompositionsSize;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::make_pair(a, b), [](const Composition& c, auto key) {
        return c.first < key.first || (c.first == key.first && c.second < key.second);
      });
  if (it != end && it->first == a && it->second == b) return it->composite;
  return 0;
}

}  // namespace

uint8_t CanonicalCombiningClass(uint32_t cp) {
  if (cp < 0x300 || cp >= kRawByte) return 0;
  const CombiningClassRange* end = kCombiningClasses + kCombiningClassesSize;
  const CombiningClassRange* it =
      std::upper_bound(kCombiningClasses, end, cp, [](uint32_t c, const CombiningClassRange& r) { return c < r.lo; });
  if (it == kCombiningClasses) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
}

std::string NfcNormalize(absl::string_view utf8) {
  if (std::all_of(utf8.begin(), utf8.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(utf8);
  }
  std::vector<uint32_t> cps;
  cps.reserve(utf8.size());
  DecodeUtf8(utf8, &cps);

  std::vector<uint32_t> d;
  d.reserve(cps.size() + 8);
  for (uint32_t cp : cps) Decompose(cp, &d);

  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (CanonicalCombiningClass(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && CanonicalCombiningClass(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](uint32_t a, uint32_t b) { return CanonicalCombiningClass(a) < CanonicalCombiningClass(b); });
    i = j;
  }

  // Canonical composition: C joins the last starter S unless a character between them has class 0 or
  // a class >= C's (then C is blocked from S).
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;
  int last_ccc = -1;  // class of the last character kept after the starter; -1: none
  for (uint32_t c : d) {
    const int ccc = CanonicalCombiningClass(c);
    if (starter != SIZE_MAX && (last_ccc == -1 || (last_ccc != 0 && last_ccc < ccc))) {
      if (uint32_t composite = Compose(out[starter], c)) {
        out[starter] = composite;
        continue;
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(c);
  }

  std::string result;
  result.reserve(utf8.size());
  for (uint32_t cp : out) AppendCodePoint(cp, &result);
  return result;
}

}  // namespace baton
