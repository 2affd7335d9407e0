#include "core/text/nfc.h"

#include <algorithm>
#include <vector>

#include "core/text/unicode_nfc_data.h"

namespace baton {
namespace {

// Hangul syllable arithmetic (Unicode §3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid byte b travels as kRawByte + b: a starter that composes with nothing.
constexpr uint32_t kRawByte = 0x110000;

void DecodeUtf8(absl::string_view text, std::vector<uint32_t>* out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      out->push_back(b);
      ++i;
      continue;
    }
    size_t need = 0;
    uint32_t cp = 0, min = 0;
    if ((b & 0xE0) == 0xC0) {
      need = 1, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      need = 2, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      need = 3, cp = b & 0x07, min = 0x10000;
    }
    bool ok = need > 0 && i + need < n;
    for (size_t k = 1; ok && k <= need; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (s[i + k] & 0x3F);
      }
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok) {
      out->push_back(cp);
      i += need + 1;
    } else {
      out->push_back(kRawByte + b);
      ++i;
    }
  }
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp >= kRawByte) {
    out->push_back(static_cast<char>(cp - kRawByte));
  } else if (cp < 0x80) {
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
  for (uint32_t cp : out) AppendUtf8(cp, &result);
  return result;
}

}  // namespace baton
