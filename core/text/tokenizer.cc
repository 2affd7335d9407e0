#include "core/text/tokenizer.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/text/nfc.h"
#include "core/text/utf8.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxVocabId = 16 * 1024 * 1024;  // far above any real vocabulary

// GPT-2 bytes_to_unicode: the code point each byte maps to.
const std::array<uint32_t, 256>& ByteToCodePoint() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<uint32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// Inverse of ByteLevelEncode for one token string. Characters outside the byte map (none in a
// well-formed byte-level vocabulary) are copied through as UTF-8.
void ByteLevelDecodeInto(absl::string_view token, std::string* out) {
  static const std::vector<int> cp_to_byte = [] {
    std::vector<int> v(512, -1);
    for (int b = 0; b < 256; ++b) v[ByteToCodePoint()[b]] = b;
    return v;
  }();
  const auto* s = reinterpret_cast<const uint8_t*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    uint32_t cp = s[i];
    size_t len = 1;
    if (cp >= 0xC0 && cp < 0xE0 && i + 1 < token.size()) {
      cp = ((cp & 0x1F) << 6) | (s[i + 1] & 0x3F);
      len = 2;
    }
    if (cp < cp_to_byte.size() && cp_to_byte[cp] >= 0 && (len == 2 || cp < 0x80)) {
      out->push_back(static_cast<char>(cp_to_byte[cp]));
    } else {
      out->append(token.data() + i, len);
    }
    i += len;
  }
}

bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool IsAsciiWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// A special-token field of tokenizer_config.json: "…", {"content": "…"} or null.
std::optional<std::string> ConfigToken(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::string ByteLevelEncode(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendUtf8(ByteToCodePoint()[b], &out);
  return out;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(std::string config, ReadFileIfExists(JoinPath(DirName(path), "tokenizer_config.json")));
  return FromJson(text, path, config);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(absl::string_view tokenizer_json,
                                                                     absl::string_view source,
                                                                     absl::string_view config_json) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  absl::Status status;
  try {
    status = tok->Parse(tokenizer_json, source, config_json);
  } catch (const Json::exception& e) {
    status = absl::InvalidArgumentError(absl::StrCat(source, ": malformed tokenizer: ", e.what()));
  }
  if (!status.ok()) return status;
  return tok;
}

absl::Status BpeTokenizer::Parse(absl::string_view tokenizer_json, absl::string_view source,
                                 absl::string_view config_json) {
  auto error = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(source, ": ", parts...)); };
  Json j = Json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error("not a JSON object");
  if (!j.contains("model") || !j["model"].is_object()) return error("missing \"model\"");
  const Json& model = j["model"];
  std::string type = model.value("type", "BPE");
  if (type != "BPE") return error("model.type is \"", type, "\", expected \"BPE\"");
  if (model.value("byte_fallback", false)) {
    return error("model.byte_fallback=true (SentencePiece-style BPE) is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return error("model.", key, " is not supported");
    }
  }
  ignore_merges_ = model.value("ignore_merges", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) return error("missing model.vocab");
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return error("missing model.merges");
  }

  // Vocabulary and added tokens together define the id space.
  int64_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxVocabId) return error("vocab id ", id, " of \"", it.key(), "\"");
    vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const Json& t : j["added_tokens"]) {
      AddedToken a{t.at("content").get<std::string>(), t.at("id").get<int64_t>(), t.value("special", false),
                   t.value("lstrip", false),           t.value("rstrip", false),  t.value("single_word", false)};
      if (a.id < 0 || a.id > kMaxVocabId) return error("added token id ", a.id);
      if (a.content.empty()) return error("added token ", a.id, " has empty content");
      max_id = std::max(max_id, a.id);
      added_.push_back(std::move(a));
    }
  }
  id_to_token_.assign(max_id + 1, "");
  id_kind_.assign(max_id + 1, 0);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    id_kind_[id] = 1;
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    id_to_token_[added_[i].id] = added_[i].content;
    id_kind_[added_[i].id] = added_[i].special ? 3 : 2;
    added_by_first_byte_[static_cast<uint8_t>(added_[i].content[0])].push_back(i);
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [this](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
  }

  for (int b = 0; b < 256; ++b) {
    std::string s = ByteLevelEncode(std::string(1, static_cast<char>(b)));
    auto it = vocab_.find(s);
    if (it == vocab_.end()) return error("byte-level vocab lacks the token for byte ", b);
    byte_ids_[b] = it->second;
  }

  const Json& merges = model["merges"];
  if (merges.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return error("too many merges");
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b" (older tokenizers)
      std::string s = m.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return error("merge ", rank, " \"", s, "\" is not two tokens separated by one space");
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {  // ["a", "b"] (tokenizers >= 0.20)
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return error("merge ", rank, " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto l = vocab_.find(left), r = vocab_.find(right), out = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || out == vocab_.end()) {
      return error("merge ", rank, " (\"", left, "\", \"", right, "\") uses a token not in vocab");
    }
    uint64_t key = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint64_t>(r->second);
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), out->second});
  }

  // normalizer: none, or NFC (Qwen2/3), applied to the text between added tokens.
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    std::string ntype = j["normalizer"].value("type", "");
    if (ntype != "NFC") return error("normalizer \"", ntype, "\" is not supported");
    nfc_ = true;
  }

  // pre_tokenizer: ByteLevel alone, or Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)].
  if (!j.contains("pre_tokenizer") || !j["pre_tokenizer"].is_object()) {
    return error("missing pre_tokenizer (a byte-level BPE needs ByteLevel)");
  }
  const Json& pre = j["pre_tokenizer"];
  std::vector<Json> steps;
  if (pre.value("type", "") == "Sequence") {
    for (const Json& s : pre.at("pretokenizers")) steps.push_back(s);
  } else {
    steps.push_back(pre);
  }
  bool saw_byte_level = false;
  for (const Json& s : steps) {
    std::string stype = s.value("type", "");
    if (stype == "Split" && !saw_byte_level && !split_) {
      if (s.value("behavior", "") != "Isolated" || s.value("invert", false)) {
        return error("pre_tokenizer Split must have behavior Isolated and invert false");
      }
      if (!s.contains("pattern") || !s["pattern"].contains("Regex")) {
        return error("pre_tokenizer Split needs a {\"Regex\": ...} pattern");
      }
      auto p = SplitPatternFromRegex(s["pattern"]["Regex"].get<std::string>());
      if (!p.ok()) return Annotate(p.status(), source);
      split_ = *p;
    } else if (stype == "ByteLevel" && !saw_byte_level) {
      saw_byte_level = true;
      add_prefix_space_ = s.value("add_prefix_space", false);
      if (s.value("use_regex", true)) {
        if (split_) return error("Split followed by ByteLevel(use_regex=true) is not supported");
        split_ = SplitPattern::kGpt2;
      }
    } else {
      return error("unsupported pre_tokenizer step \"", stype, "\"");
    }
  }
  if (!saw_byte_level) return error("pre_tokenizer has no ByteLevel step");
  if (j.contains("decoder") && !j["decoder"].is_null() && j["decoder"].value("type", "") != "ByteLevel") {
    return error("decoder must be ByteLevel, got \"", j["decoder"].value("type", ""), "\"");
  }

  Json config;
  if (!config_json.empty()) {
    config = Json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (config.is_discarded()) return error("tokenizer_config.json is not valid JSON");
  }
  auto pick = [&](const char* key, std::initializer_list<const char*> fallbacks) {
    std::optional<int64_t> id;
    if (config.is_object() && config.contains(key)) {
      if (auto name = ConfigToken(config, key)) id = TokenId(*name);
      return id;
    }
    for (const char* name : fallbacks) {
      if ((id = TokenId(name))) break;
    }
    return id;
  };
  bos_id_ = pick("bos_token", {"<s>", "<|begin_of_text|>"});
  eos_id_ = pick("eos_token", {"</s>", "<|endoftext|>"});
  pad_id_ = pick("pad_token", {"<pad>", "<|endoftext|>"});
  return absl::OkStatus();
}

std::optional<int64_t> BpeTokenizer::TokenId(absl::string_view token) const {
  for (const AddedToken& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BpeTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size() || id_kind_[id] == 0) return std::nullopt;
  return id_to_token_[id];
}

size_t BpeTokenizer::MatchAddedToken(absl::string_view text, size_t pos, size_t* index) const {
  for (size_t i : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const AddedToken& a = added_[i];
    if (text.substr(pos, a.content.size()) != a.content) continue;
    if (a.single_word) {
      size_t end = pos + a.content.size();
      if ((pos > 0 && IsAsciiWordChar(text[pos - 1])) || (end < text.size() && IsAsciiWordChar(text[end]))) {
        continue;
      }
    }
    *index = i;
    return a.content.size();
  }
  return 0;
}

std::vector<int64_t> BpeTokenizer::Encode(absl::string_view text) const {
  std::vector<int64_t> ids;
  size_t segment_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t index = 0;
    size_t len = added_.empty() ? 0 : MatchAddedToken(text, pos, &index);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& a = added_[index];
    size_t segment_end = pos;
    if (a.lstrip) {
      while (segment_end > segment_begin && IsAsciiSpace(text[segment_end - 1])) --segment_end;
    }
    EncodeSegment(text.substr(segment_begin, segment_end - segment_begin), &ids);
    ids.push_back(a.id);
    pos += len;
    if (a.rstrip) {
      while (pos < text.size() && IsAsciiSpace(text[pos])) ++pos;
    }
    segment_begin = pos;
  }
  EncodeSegment(text.substr(segment_begin), &ids);
  return ids;
}

void BpeTokenizer::EncodeSegment(absl::string_view segment, std::vector<int64_t>* out) const {
  if (segment.empty()) return;
  std::string normalized;
  if (nfc_) {
    normalized = NfcNormalize(segment);
    segment = normalized;
  }
  std::string prefixed;
  if (add_prefix_space_ && segment[0] != ' ') {
    prefixed = absl::StrCat(" ", segment);
    segment = prefixed;
  }
  if (!split_) {
    EncodePiece(segment, out);
    return;
  }
  for (absl::string_view piece : SplitText(segment, *split_)) EncodePiece(piece, out);
}

void BpeTokenizer::EncodePiece(absl::string_view piece, std::vector<int64_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(ByteLevelEncode(piece));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int64_t> symbols;
  symbols.reserve(piece.size());
  for (unsigned char b : piece) symbols.push_back(byte_ids_[b]);
  // Repeatedly merge the adjacent pair with the lowest rank, leftmost on ties: the order of
  // tokenizers' BPE::merge_word priority queue. Pieces are words, so O(n^2) is fine.
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best_pos = 0;
    int64_t best_id = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      uint64_t key = (static_cast<uint64_t>(symbols[i]) << 32) | static_cast<uint64_t>(symbols[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_pos = i;
        best_id = it->second.new_id;
      }
    }
    if (best_id < 0) break;
    symbols[best_pos] = best_id;
    symbols.erase(symbols.begin() + best_pos + 1);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
}

absl::StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= vocab_size() || id_kind_[id] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", i, " is not in the vocabulary of size ", vocab_size()));
    }
    if (id_kind_[id] >= 2) {
      if (!(skip_special_tokens && id_kind_[id] == 3)) out += id_to_token_[id];
    } else {
      ByteLevelDecodeInto(id_to_token_[id], &out);
    }
  }
  return out;
}

}  // namespace baton
