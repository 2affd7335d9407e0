// sentencepiece Unigram tokenizer loaded from a Hugging Face `tokenizer.json` (the kind umT5 / T5 ship,
// made by transformers' T5 slow->fast converter), encoding id-for-id as Hugging Face tokenizers does.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/text/precompiled_charsmap.h"

namespace baton {

// Encoding, step by step:
//   1. added tokens (all of T5's are normalized=false: <pad>, </s>, <unk>, <extra_id_N>) are split out of the
//      raw text first, leftmost-longest;
//   2. each remaining segment is normalized by the normalizer chain: Precompiled (the sentencepiece charsmap,
//      precompiled_charsmap.h), Replace (a literal, or a regex of the form "X{n,}": a run of n or more of one
//      character), Strip, Sequence;
//   3. pre-tokenized by WhitespaceSplit and/or Metaspace (replacement "▁", prepend_scheme always/first/never
//      or the legacy add_prefix_space, split on "▁" merged with the next piece), Sequence;
//   4. each piece is segmented by the Viterbi best path over the vocabulary's scores (tokenizers' optimized
//      Unigram: unknown characters cost min_score - 10 and consecutive unknowns fuse into one <unk>, or into
//      <0xXX> byte pieces with byte_fallback);
//   5. with add_special_tokens, the post-processor's TemplateProcessing "single" template (T5: "$A </s>").
// Limits: added tokens with normalized=true are matched on the raw text too; lstrip/rstrip/single_word are
// ignored (T5's have none); prepend_scheme "first" prepends only before the text's first piece.
// Thread-safe after loading.
class UnigramTokenizer {
 public:
  // Loads `path` (a tokenizer.json); pad/eos/unk ids from a sibling tokenizer_config.json when present
  // (`pad_token`, `eos_token`, `unk_token`), else "<pad>", "</s>", "<unk>".
  static absl::StatusOr<std::unique_ptr<UnigramTokenizer>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<UnigramTokenizer>> FromJson(absl::string_view tokenizer_json,
                                                                    absl::string_view source,
                                                                    absl::string_view config_json = "");

  // Token ids of `text`; with add_special_tokens the post-processor's template is applied (T5: </s> after).
  std::vector<int64_t> Encode(absl::string_view text, bool add_special_tokens) const;
  // The template's special tokens around a sequence: ids before and after (T5: none, [</s>]).
  const std::vector<int64_t>& template_prefix() const { return prefix_; }
  const std::vector<int64_t>& template_suffix() const { return suffix_; }

  std::optional<int64_t> TokenId(absl::string_view piece) const;
  int64_t vocab_size() const { return static_cast<int64_t>(pieces_.size()); }
  std::optional<int64_t> pad_id() const { return pad_id_; }
  std::optional<int64_t> eos_id() const { return eos_id_; }

 private:
  struct NormalizerStep {
    enum Kind { kPrecompiled, kReplace, kReplaceRun, kStrip } kind;
    std::optional<PrecompiledCharsmap> charsmap;
    std::string from, to;              // kReplace: literal; kReplaceRun: `from` is the repeated character
    int64_t min_repeat = 0;            // kReplaceRun
    bool left = false, right = false;  // kStrip
  };
  struct AddedToken {
    std::string content;
    int64_t id;
  };

  UnigramTokenizer() = default;
  absl::Status Parse(absl::string_view tokenizer_json, absl::string_view source, absl::string_view config_json);
  absl::Status ParseModel(const void* model_json, absl::string_view source);
  absl::Status ParseNormalizer(const void* json, absl::string_view source);
  absl::Status ParsePreTokenizer(const void* json, absl::string_view source);
  absl::Status ParsePostProcessor(const void* json, absl::string_view source);
  std::string Normalize(absl::string_view text) const;
  std::vector<std::string> PreTokenize(const std::string& normalized, bool first_segment) const;
  void EncodePiece(absl::string_view piece, std::vector<int64_t>* out) const;
  void EncodeSegment(absl::string_view segment, bool first_segment, std::vector<int64_t>* out) const;

  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string, int64_t> piece_id_;
  size_t max_piece_bytes_ = 0;
  double min_score_ = 0;
  std::optional<int64_t> unk_id_;
  bool byte_fallback_ = false;
  std::vector<NormalizerStep> normalizers_;
  bool whitespace_split_ = false;
  bool metaspace_ = false;
  std::string replacement_ = "\xE2\x96\x81";  // "▁"
  enum class Prepend { kAlways, kFirst, kNever } prepend_ = Prepend::kAlways;
  bool metaspace_split_ = true;
  std::vector<AddedToken> added_;  // longest first
  std::vector<int64_t> prefix_, suffix_;
  std::optional<int64_t> pad_id_, eos_id_;
};

}  // namespace baton
