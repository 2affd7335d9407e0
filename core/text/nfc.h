// Unicode Normalization Form C, as the Hugging Face tokenizers `NFC` normalizer applies it (Qwen2/3
// tokenizer.json files declare one): canonical decomposition, canonical ordering of combining marks,
// canonical composition (UAX #15). Tables come from unicode_nfc_data.cc (generated from Python's
// unicodedata, Unicode 14.0); characters assigned later pass through unchanged. Bytes that are not valid
// UTF-8 are copied through and block composition across them. Thread-safe (pure functions).
#pragma once

#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>

namespace baton {

// The NFC form of `utf8`. ASCII-only input is returned as is without decoding.
std::string NfcNormalize(absl::string_view utf8);

// Canonical combining class of `cp` (0 for starters).
uint8_t CanonicalCombiningClass(uint32_t cp);

}  // namespace baton
