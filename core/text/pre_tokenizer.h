// Pre-tokenizer split for byte-level BPE tokenizers: the HF `Split(Regex, behavior=Isolated)` step,
// hand-written for the few regexes the supported models use (std::regex has no \p{..} classes).
// Each pattern is an ordered alternation; at every position the first alternative that matches
// wins, with the greedy/backtracking semantics of the original regex (comments in the .cc file walk
// through each alternative). Pieces are byte ranges of the input, so invalid UTF-8 still round-trips
// (an invalid byte is one code point of class kOther).
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <string>
#include <vector>

namespace baton {

enum class SplitPattern {
  // Mistral Tekken (Mistral-Small-3.1, Mistral-Nemo, Pixtral): case-aware words, single digits.
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
  //   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
  //   |\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kTekken,
  // Qwen2 / Qwen2.5 / Qwen3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
  //   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,
  // Llama-3 / cl100k: as kQwen2 but \p{N}{1,3}.
  kLlama3,
  // GPT-2 (ByteLevel with use_regex=true): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+
  //   | ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
};

// The exact regex string for `pattern` as it appears in tokenizer.json (JSON-unescaped).
const char* SplitPatternRegex(SplitPattern pattern);

// Maps a tokenizer.json Split regex to the pattern that implements it; an unknown regex is an
// UNIMPLEMENTED error quoting it (a hand-written splitter must not silently approximate).
absl::StatusOr<SplitPattern> SplitPatternFromRegex(absl::string_view regex);

// Splits `text` into consecutive pieces covering it exactly (concatenation == text).
std::vector<absl::string_view> SplitText(absl::string_view text, SplitPattern pattern);

}  // namespace baton
