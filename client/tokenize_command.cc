#include "client/tokenize_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/text/tokenizer.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::Status Tokenize(const Args& args) {
  ASSIGN_OR_RETURN(auto tokenizer, BpeTokenizer::Load(args.Get("tokenizer")));
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
    out.push_back(tokenizer->Encode(strings[i].get<std::string>()));
  }
  RETURN_IF_ERROR(WriteFileAtomic(args.Get("output"), out.dump()));
  std::printf("wrote %s: token ids of %zu strings\n", args.Get("output").c_str(), strings.size());
  return absl::OkStatus();
}

}  // namespace

Command TokenizeCommand() {
  return {"tokenize",
          "Token ids of strings with a tokenizer.json (no special tokens added), for checking against tokenizers.",
          {{"tokenizer", "tokenizer.json (bos/eos/pad from a sibling tokenizer_config.json)", "", true},
           {"inputs", "JSON file: an array of strings", "", true},
           {"output", "JSON file: an array of id arrays", "", true}},
          Tokenize};
}

}  // namespace baton
