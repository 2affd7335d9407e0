#include "core/text/unigram_tokenizer.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_replace.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/text/utf8.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Json = nlohmann::json;

const Json& J(const void* p) { return *static_cast<const Json*>(p); }

// Rust's char::is_whitespace (Unicode White_Space), which WhitespaceSplit and Strip use.
bool IsWhiteSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string Strip(absl::string_view s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      const Utf8Step step = DecodeUtf8At(s, begin);
      if (!step.valid || !IsWhiteSpace(step.cp)) break;
      begin += step.length;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
      const Utf8Step step = DecodeUtf8At(s, start);
      if (!step.valid || start + step.length != end || !IsWhiteSpace(step.cp)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

// Replaces every run of `min` or more copies of `unit` by `to` (the regex "X{n,}").
std::string ReplaceRuns(absl::string_view s, absl::string_view unit, int64_t min, absl::string_view to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    int64_t count = 0;
    while (absl::StartsWith(s.substr(j), unit)) {
      j += unit.size();
      ++count;
    }
    if (count >= min) {
      out.append(to.data(), to.size());
      i = j;
    } else if (count > 0) {
      out.append(s.data() + i, j - i);
      i = j;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::optional<int64_t> LookupToken(const Json& config, const char* key, const UnigramTokenizer& tok,
                                   const char* fallback) {
  std::string name = fallback;
  auto it = config.is_object() ? config.find(key) : config.end();
  if (it != config.end()) {
    if (it->is_string()) name = it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) name = (*it)["content"];
  }
  return tok.TokenId(name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnigramTokenizer>> UnigramTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(std::string config, ReadFileIfExists(JoinPath(DirName(path), "tokenizer_config.json")));
  return FromJson(text, path, config);
}

absl::StatusOr<std::unique_ptr<UnigramTokenizer>> UnigramTokenizer::FromJson(absl::string_view tokenizer_json,
                                                                             absl::string_view source,
                                                                             absl::string_view config_json) {
  std::unique_ptr<UnigramTokenizer> tok(new UnigramTokenizer());
  RETURN_IF_ERROR(tok->Parse(tokenizer_json, source, config_json));
  return tok;
}

absl::Status UnigramTokenizer::Parse(absl::string_view tokenizer_json, absl::string_view source,
                                     absl::string_view config_json) {
  Json j = Json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model")) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a tokenizer.json (no model)"));
  }
  try {
    RETURN_IF_ERROR(ParseModel(&j["model"], source));
    RETURN_IF_ERROR(ParseNormalizer(&j["normalizer"], source));
    RETURN_IF_ERROR(ParsePreTokenizer(&j["pre_tokenizer"], source));
    RETURN_IF_ERROR(ParsePostProcessor(&j["post_processor"], source));
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& t : j["added_tokens"]) added_.push_back({t.at("content"), t.at("id")});
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  Json config;
  if (!config_json.empty()) {
    config = Json::parse(config_json.begin(), config_json.end(), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": bad tokenizer_config.json"));
  }
  pad_id_ = LookupToken(config, "pad_token", *this, "<pad>");
  eos_id_ = LookupToken(config, "eos_token", *this, "</s>");
  return absl::OkStatus();
}

absl::Status UnigramTokenizer::ParseModel(const void* p, absl::string_view source) {
  const Json& m = J(p);
  if (!m.is_object() || m.value("type", "") != "Unigram") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model type is '", m.is_object() ? m.value("type", "") : "", "', expected Unigram"));
  }
  min_score_ = std::numeric_limits<double>::infinity();
  for (const auto& entry : m.at("vocab")) {
    const std::string piece = entry.at(0).get<std::string>();
    const double score = entry.at(1).get<double>();
    piece_id_[piece] = static_cast<int64_t>(pieces_.size());  // a repeated piece maps to its last id, as upstream
    pieces_.emplace_back(piece, score);
    max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
    min_score_ = std::min(min_score_, score);
  }
  if (pieces_.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": empty Unigram vocabulary"));
  if (m.contains("unk_id") && !m["unk_id"].is_null()) unk_id_ = m["unk_id"].get<int64_t>();
  byte_fallback_ = m.value("byte_fallback", false);
  return absl::OkStatus();
}

absl::Status UnigramTokenizer::ParseNormalizer(const void* p, absl::string_view source) {
  const Json& n = J(p);
  if (n.is_null()) return absl::OkStatus();
  const std::string type = n.at("type");
  if (type == "Sequence") {
    for (const auto& sub : n.at("normalizers")) RETURN_IF_ERROR(ParseNormalizer(&sub, source));
    return absl::OkStatus();
  }
  NormalizerStep step{NormalizerStep::kStrip};
  if (type == "Precompiled") {
    step.kind = NormalizerStep::kPrecompiled;
    ASSIGN_OR_RETURN(step.charsmap,
                     PrecompiledCharsmap::FromBase64(n.at("precompiled_charsmap").get<std::string>(), source));
  } else if (type == "Replace") {
    step.to = n.at("content").get<std::string>();
    const Json& pattern = n.at("pattern");
    if (pattern.contains("String")) {
      step.kind = NormalizerStep::kReplace;
      step.from = pattern["String"].get<std::string>();
    } else {
      // Only "X{n,}" (one character repeated n or more times), the regex T5 converters write.
      static const std::regex kRun(R"(^(.+)\{([0-9]+),\}$)");
      const std::string rx = pattern.at("Regex").get<std::string>();
      std::smatch match;
      if (!std::regex_match(rx, match, kRun) || !IsValidUtf8(match[1].str()) ||
          DecodeUtf8At(match[1].str(), 0).length != match[1].str().size() ||
          absl::StrContains("\\.[]()*+?|^$", rx[0])) {
        return absl::UnimplementedError(absl::StrCat(source, ": Replace regex '", rx, "' is not supported (X{n,})"));
      }
      step.kind = NormalizerStep::kReplaceRun;
      step.from = match[1].str();
      step.min_repeat = std::stoll(match[2].str());
    }
  } else if (type == "Strip") {
    step.left = n.value("strip_left", n.value("left", false));
    step.right = n.value("strip_right", n.value("right", false));
  } else {
    return absl::UnimplementedError(absl::StrCat(source, ": normalizer '", type, "' is not supported"));
  }
  normalizers_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status UnigramTokenizer::ParsePreTokenizer(const void* p, absl::string_view source) {
  const Json& t = J(p);
  if (t.is_null()) return absl::OkStatus();
  const std::string type = t.at("type");
  if (type == "Sequence") {
    for (const auto& sub : t.at("pretokenizers")) RETURN_IF_ERROR(ParsePreTokenizer(&sub, source));
    return absl::OkStatus();
  }
  if (type == "WhitespaceSplit") {
    if (metaspace_) return absl::UnimplementedError(absl::StrCat(source, ": WhitespaceSplit after Metaspace"));
    whitespace_split_ = true;
    return absl::OkStatus();
  }
  if (type != "Metaspace") {
    return absl::UnimplementedError(absl::StrCat(source, ": pre-tokenizer '", type, "' is not supported"));
  }
  metaspace_ = true;
  replacement_ = t.value("replacement", replacement_);
  metaspace_split_ = t.value("split", true);
  if (t.contains("prepend_scheme") && t["prepend_scheme"].is_string()) {
    const std::string scheme = t["prepend_scheme"];
    if (scheme == "always") {
      prepend_ = Prepend::kAlways;
    } else if (scheme == "first") {
      prepend_ = Prepend::kFirst;
    } else if (scheme == "never") {
      prepend_ = Prepend::kNever;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(source, ": Metaspace prepend_scheme '", scheme, "'"));
    }
  } else {
    prepend_ = t.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
  }
  return absl::OkStatus();
}

absl::Status UnigramTokenizer::ParsePostProcessor(const void* p, absl::string_view source) {
  const Json& t = J(p);
  if (t.is_null()) return absl::OkStatus();
  if (t.at("type") != "TemplateProcessing") {
    return absl::UnimplementedError(absl::StrCat(source, ": post-processor '", t.at("type").get<std::string>(),
                                                 "' is not supported (TemplateProcessing)"));
  }
  bool after = false;
  for (const auto& item : t.at("single")) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id");
    for (const auto& id : t.at("special_tokens").at(name).at("ids")) {
      (after ? suffix_ : prefix_).push_back(id.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

std::optional<int64_t> UnigramTokenizer::TokenId(absl::string_view piece) const {
  for (const auto& a : added_) {
    if (a.content == piece) return a.id;
  }
  auto it = piece_id_.find(std::string(piece));
  if (it == piece_id_.end()) return std::nullopt;
  return it->second;
}

std::string UnigramTokenizer::Normalize(absl::string_view text) const {
  std::string s(text);
  for (const auto& step : normalizers_) {
    switch (step.kind) {
      case NormalizerStep::kPrecompiled:
        s = step.charsmap->Normalize(s);
        break;
      case NormalizerStep::kReplace:
        if (!step.from.empty()) s = absl::StrReplaceAll(s, {{step.from, step.to}});
        break;
      case NormalizerStep::kReplaceRun:
        s = ReplaceRuns(s, step.from, step.min_repeat, step.to);
        break;
      case NormalizerStep::kStrip:
        s = Strip(s, step.left, step.right);
        break;
    }
  }
  return s;
}

std::vector<std::string> UnigramTokenizer::PreTokenize(const std::string& normalized, bool first_segment) const {
  std::vector<std::string> words;
  if (whitespace_split_) {
    std::string word;
    for (size_t i = 0; i < normalized.size();) {
      const Utf8Step step = DecodeUtf8At(normalized, i);
      if (step.valid && IsWhiteSpace(step.cp)) {
        if (!word.empty()) words.push_back(std::move(word));
        word.clear();
      } else {
        word.append(normalized, i, step.length);
      }
      i += step.length;
    }
    if (!word.empty()) words.push_back(std::move(word));
  } else if (!normalized.empty()) {
    words.push_back(normalized);
  }
  if (!metaspace_) return words;
  std::vector<std::string> pieces;
  for (size_t w = 0; w < words.size(); ++w) {
    std::string s = absl::StrReplaceAll(words[w], {{" ", replacement_}});
    const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && first_segment && w == 0);
    if (prepend && !absl::StartsWith(s, replacement_)) s = replacement_ + s;
    if (!metaspace_split_) {
      pieces.push_back(std::move(s));
      continue;
    }
    size_t start = 0;  // each replacement begins a piece (MergedWithNext)
    for (size_t pos = s.find(replacement_, 1); pos != std::string::npos; pos = s.find(replacement_, pos + 1)) {
      if (pos > start) pieces.push_back(s.substr(start, pos - start));
      start = pos;
    }
    if (start < s.size()) pieces.push_back(s.substr(start));
  }
  return pieces;
}

void UnigramTokenizer::EncodePiece(absl::string_view s, std::vector<int64_t>* out) const {
  struct Node {
    int64_t id = -1;
    double score = 0;
    int64_t start = -1;
  };
  const size_t n = s.size();
  std::vector<Node> best(n + 1);
  const double unk_score = min_score_ - 10.0;
  for (size_t start = 0; start < n;) {
    const double here = best[start].score;
    const size_t char_len = DecodeUtf8At(s, start).length;
    bool has_single = false;
    for (size_t len = 1; len <= max_piece_bytes_ && start + len <= n; ++len) {
      auto it = piece_id_.find(std::string(s.substr(start, len)));
      if (it == piece_id_.end()) continue;
      Node& target = best[start + len];
      const double candidate = pieces_[it->second].second + here;
      if (target.start < 0 || candidate > target.score) target = {it->second, candidate, static_cast<int64_t>(start)};
      if (len == char_len) has_single = true;
    }
    if (!has_single) {
      Node& target = best[start + char_len];
      const double candidate = unk_score + here;
      if (target.start < 0 || candidate > target.score) {
        target = {unk_id_.value_or(-1), candidate, static_cast<int64_t>(start)};
      }
    }
    start += char_len;
  }
  // Back-track; consecutive unknowns fuse into one string (fuse_unk).
  std::vector<std::pair<std::string, bool>> tokens;  // (text, is_unk), reversed
  for (size_t end = n; end > 0;) {
    const Node& node = best[end];
    const size_t start = static_cast<size_t>(node.start);
    const bool unk = unk_id_.has_value() && node.id == *unk_id_;
    std::string text(s.substr(start, end - start));
    if (unk && !tokens.empty() && tokens.back().second) {
      tokens.back().first = text + tokens.back().first;
    } else {
      tokens.emplace_back(std::move(text), unk);
    }
    end = start;
  }
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) {
    auto found = piece_id_.find(it->first);
    if (found != piece_id_.end()) {
      out->push_back(found->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (char c : it->first) {
        auto b = piece_id_.find(absl::StrFormat("<0x%02X>", static_cast<uint8_t>(c)));
        if (b == piece_id_.end()) break;
        bytes.push_back(b->second);
      }
      if (bytes.size() == it->first.size()) {
        out->insert(out->end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    out->push_back(unk_id_.value_or(0));
  }
}

void UnigramTokenizer::EncodeSegment(absl::string_view segment, bool first_segment, std::vector<int64_t>* out) const {
  for (const std::string& piece : PreTokenize(Normalize(segment), first_segment)) EncodePiece(piece, out);
}

std::vector<int64_t> UnigramTokenizer::Encode(absl::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_;
  size_t segment_start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* match = nullptr;
    for (const auto& a : added_) {
      if (!a.content.empty() && absl::StartsWith(text.substr(i), a.content)) {
        match = &a;
        break;  // longest first
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    if (i > segment_start) EncodeSegment(text.substr(segment_start, i - segment_start), segment_start == 0, &ids);
    ids.push_back(match->id);
    i += match->content.size();
    segment_start = i;
  }
  if (segment_start < text.size()) EncodeSegment(text.substr(segment_start), segment_start == 0, &ids);
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

}  // namespace baton
