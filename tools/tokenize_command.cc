#include "tools/tokenize_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/text/tokenizer.h"
#include "core/text/unigram_tokenizer.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// A tokenizer.json's model type: "Unigram" (sentencepiece, umT5) or another (byte-level BPE).
absl::StatusOr<std::string> ModelType(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a tokenizer.json (no model)"));
  }
  return j["model"].value("type", "");
}

absl::Status Tokenize(const Args& args) {
  const std::string add_special = args.Get("add-special-tokens");
  if (add_special != "true" && add_special != "false") {
    return absl::InvalidArgumentError("--add-special-tokens takes true or false");
  }
  ASSIGN_OR_RETURN(std::string model_type, ModelType(args.Get("tokenizer")));
  std::function<std::vector<int64_t>(const std::string&)> encode;
  std::unique_ptr<BpeTokenizer> bpe;
  std::unique_ptr<UnigramTokenizer> unigram;
  if (model_type == "Unigram") {
    ASSIGN_OR_RETURN(unigram, UnigramTokenizer::Load(args.Get("tokenizer")));
    encode = [&](const std::string& s) { return unigram->Encode(s, add_special == "true"); };
  } else {
    if (add_special == "true") return absl::InvalidArgumentError("--add-special-tokens is for Unigram tokenizers");
    ASSIGN_OR_RETURN(bpe, BpeTokenizer::Load(args.Get("tokenizer")));
    encode = [&](const std::string& s) { return bpe->Encode(s); };
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(args.Get("inputs")));
  auto strings = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (strings.is_discarded() || !strings.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(args.Get("inputs"), ": not a JSON array of strings"));
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < strings.size(); ++i) {
    if (!strings[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(args.Get("inputs"), ": element ", i, " is not a string"));
    }
    out.push_back(encode(strings[i].get<std::string>()));
  }
  RETURN_IF_ERROR(WriteFileAtomic(args.Get("output"), out.dump()));
  std::printf("wrote %s: token ids of %zu strings\n", args.Get("output").c_str(), strings.size());
  return absl::OkStatus();
}

}  // namespace

Command TokenizeCommand() {
  return {"tokenize",
          "Token ids of strings with a tokenizer.json (byte-level BPE or Unigram), for checking against tokenizers.",
          {{"tokenizer", "tokenizer.json (bos/eos/pad from a sibling tokenizer_config.json)", "", true},
           {"inputs", "JSON file: an array of strings", "", true},
           {"output", "JSON file: an array of id arrays", "", true},
           {"add-special-tokens", "true: apply a Unigram tokenizer's post-processor template (T5: </s>)", "false"}},
          Tokenize};
}

}  // namespace baton
