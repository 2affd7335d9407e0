// A small but real byte-level BPE tokenizer for the tiny FLUX.2 pipeline (`baton init-weights
// --pipeline tiny`): Mistral's tokenizer.json schema (Tekken split regex, ByteLevel, ignore_merges,
// the first 20 Tekken special tokens at their real ids), the 256 byte tokens, and merges learned at
// generation time by a plain BPE trainer over a built-in English corpus. Fully deterministic: the
// same bytes on every machine and run.
#pragma once

#include <absl/status/status.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/text/pre_tokenizer.h"

namespace baton {

constexpr int kTinyBpeNumMerges = 400;

// Learns `num_merges` merges over `texts`: split each text with `pattern`, count pieces, then
// repeatedly merge the most frequent adjacent pair (ties: smallest (left id, right id), ids in
// creation order). Returns the merges as byte strings (not byte-level mapped), in rank order.
// Stops early only if no adjacent pair is left.
std::vector<std::pair<std::string, std::string>> TrainByteLevelBpe(const std::vector<std::string>& texts,
                                                                   SplitPattern pattern, int num_merges);

struct TinyTokenizerJson {
  std::string json;    // tokenizer.json contents
  int64_t vocab_size;  // 20 special + 256 byte + distinct merge results
};
TinyTokenizerJson BuildTinyBpeTokenizerJson();

// Writes BuildTinyBpeTokenizerJson().json to `path` atomically.
absl::Status WriteTinyBpeTokenizerJson(const std::string& path);

// tokenizer_config.json for the same folder: bos "<s>", eos "</s>", pad "<pad>", unk "<unk>".
std::string TinyTokenizerConfigJson();

// The built-in training corpus (English prose and image-caption style sentences).
absl::string_view TinyBpeCorpus();

}  // namespace baton
