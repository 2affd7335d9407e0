// Byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json` (the kind Mistral-Small-3.1
// "Tekken" and Qwen2/3 ship). Checked id-for-id against Hugging Face tokenizers
// (tests/upstream/test_tokenizer.py) on hard and fuzzed strings for Tekken- and Qwen2-style tokenizer.json files.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/text/pre_tokenizer.h"

namespace baton {

// Added/special tokens are matched literally first (leftmost-longest), the rest is split by the pre-tokenizer
// regex (pre_tokenizer.h), mapped byte → printable char (GPT-2 `bytes_to_unicode`) and merged by BPE merge rank.
// No post-processing: Encode() adds no BOS/EOS, as `add_special_tokens=False` (chat templates write "<s>"
// themselves). An NFC normalizer (Qwen2/3; nfc.h) is applied to the text between added tokens, as HF does for
// added tokens with normalized=false (all of Qwen's). Limits: added tokens with normalized=true are
// still matched on the raw text; lstrip/rstrip use ASCII whitespace and single_word uses ASCII word
// characters; BPE dropout is ignored (inference behaviour).
// Thread-safe after Load(): Encode/Decode are const and use no shared mutable state.
class BpeTokenizer {
 public:
  // Loads `path` (a tokenizer.json). bos/eos/pad come from a sibling tokenizer_config.json when
  // present (`bos_token`, `eos_token`, `pad_token`: a string or {"content": ...}); without one, the
  // conventional names are looked up (bos "<s>"/"<|begin_of_text|>", eos "</s>"/"<|endoftext|>",
  // pad "<pad>"/"<|endoftext|>").
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Load(const std::string& path);
  // Same from in-memory JSON; `source` names the input in errors; `config_json` may be empty.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(absl::string_view tokenizer_json,
                                                                absl::string_view source,
                                                                absl::string_view config_json = "");

  std::vector<int64_t> Encode(absl::string_view text) const;
  // Concatenates the tokens' bytes (byte-level decoding); added tokens decode to their content
  // unless skip_special_tokens and they are special. An id outside the vocabulary is an error.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  // Id of an added token's content or of a vocabulary entry (in byte-level form, e.g. "Ġthe").
  std::optional<int64_t> TokenId(absl::string_view token) const;
  // The vocabulary string (byte-level form) or added-token content of `id`.
  std::optional<std::string> IdToToken(int64_t id) const;

  // 1 + the largest id of the vocabulary and the added tokens (the embedding table size needed).
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> bos_id() const { return bos_id_; }
  std::optional<int64_t> eos_id() const { return eos_id_; }
  std::optional<int64_t> pad_id() const { return pad_id_; }
  // The pre-tokenizer split in use; nullopt when ByteLevel(use_regex=false) stands alone.
  std::optional<SplitPattern> split_pattern() const { return split_; }

 private:
  struct AddedToken {
    std::string content;
    int64_t id;
    bool special;
    bool lstrip;
    bool rstrip;
    bool single_word;
  };
  struct Merge {
    int32_t rank;
    int64_t new_id;
  };

  BpeTokenizer() = default;
  absl::Status Parse(absl::string_view tokenizer_json, absl::string_view source, absl::string_view config_json);
  // Length of the added token matching at `pos`, longest first; sets *index.
  size_t MatchAddedToken(absl::string_view text, size_t pos, size_t* index) const;
  void EncodeSegment(absl::string_view segment, std::vector<int64_t>* out) const;
  void EncodePiece(absl::string_view piece, std::vector<int64_t>* out) const;

  std::unordered_map<std::string, int64_t> vocab_;  // byte-level token string → id
  std::vector<std::string> id_to_token_;            // "" for ids with no entry
  std::vector<int8_t> id_kind_;                     // 0 none, 1 vocab, 2 added, 3 added special
  std::array<int64_t, 256> byte_ids_{};             // id of each single-byte token
  std::unordered_map<uint64_t, Merge> merges_;      // (left_id << 32 | right_id) → merge
  std::vector<AddedToken> added_;
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // indices into added_, longest first
  std::optional<SplitPattern> split_;
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  bool nfc_ = false;  // normalizer NFC
  std::optional<int64_t> bos_id_, eos_id_, pad_id_;
};

// GPT-2's reversible byte → printable-character map used by byte-level BPE vocabularies: bytes
// '!'..'~', '¡'..'¬', '®'..'ÿ' map to themselves, the other 68 to U+0100.. in byte order.
// Returns the UTF-8 of the mapped characters for each input byte.
std::string ByteLevelEncode(absl::string_view bytes);

}  // namespace baton
