// Unicode tables for the NFC normalizer (nfc.h), generated from Python's unicodedata by
// scripts/gen_unicode_nfc.py into unicode_nfc_data.cc. All arrays are sorted by their first field.
// Hangul syllables are not listed: nfc.cc handles them arithmetically.
#pragma once

#include <cstddef>
#include <cstdint>

namespace baton {

struct CombiningClassRange {
  uint32_t lo;
  uint32_t hi;
  uint8_t ccc;  // canonical combining class, non-zero
};

struct Decomposition {
  uint32_t cp;
  uint16_t offset;  // into kDecompositionPool
  uint8_t length;   // full canonical decomposition, already recursive
};

struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;  // primary composite (composition exclusions left out)
};

extern const char kNfcUnicodeVersion[];
extern const CombiningClassRange kCombiningClasses[];
extern const size_t kCombiningClassesSize;
extern const uint32_t kDecompositionPool[];
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionsSize;
extern const Composition kCompositions[];
extern const size_t kCompositionsSize;

}  // namespace baton
