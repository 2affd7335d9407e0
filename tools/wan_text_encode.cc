#include "tools/wan_text_encode.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>

#include <cstdio>

#include "core/device/threads.h"
#include "core/tensor/safetensors.h"
#include "core/text/umt5_config.h"
#include "core/text/umt5_encoder.h"
#include "core/text/unigram_tokenizer.h"
#include "core/text/wan_prompt.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// input_ids [B, L] integer with ids in the vocabulary; attention_mask, when given, 0/1 of the same shape.
absl::Status CheckWanInputs(const std::map<std::string, at::Tensor>& inputs, int64_t vocab, const std::string& path) {
  auto ids = inputs.find("input_ids");
  if (ids == inputs.end()) return absl::InvalidArgumentError(absl::StrCat(path, ": missing 'input_ids' [B, L]"));
  const at::Tensor& t = ids->second;
  if (t.dim() != 2 || t.numel() == 0 || !at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": input_ids must be integer [B, L], non-empty"));
  }
  if (t.min().item<int64_t>() < 0 || t.max().item<int64_t>() >= vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": input_ids outside the text encoder's vocabulary [0, ", vocab, ")"));
  }
  auto mask = inputs.find("attention_mask");
  if (mask != inputs.end() &&
      (mask->second.sizes() != t.sizes() || mask->second.lt(0).logical_or(mask->second.gt(1)).any().item<bool>())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": attention_mask must be 0/1 with input_ids' shape"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsUmt5Pipeline(const std::string& model) {
  auto text = ReadFile(JoinPath(model, "text_encoder/config.json"));
  return text.ok() && IsUmt5ConfigJson(*text);
}

absl::Status WanTextEncode(const Args& args) {
  SetComputeThreads(1);
  const std::string model = args.Get("model");
  ASSIGN_OR_RETURN(auto encoder, Umt5Encoder::Open(JoinPath(model, "text_encoder"), at::kFloat, at::kCPU));
  std::map<std::string, at::Tensor> out;
  const absl::Time start = absl::Now();
  if (args.Has("prompt")) {
    ASSIGN_OR_RETURN(int64_t max_length, args.GetInt("max-sequence-length"));
    ASSIGN_OR_RETURN(auto tokenizer, UnigramTokenizer::Load(JoinPath(model, "tokenizer/tokenizer.json")));
    ASSIGN_OR_RETURN(WanPromptIds ids, BuildWanPromptIds(*tokenizer, args.Get("prompt"), max_length));
    ASSIGN_OR_RETURN(out["prompt_embeds"], EncodeWanPrompt(*encoder, ids));
    out["input_ids"] = ids.input_ids;
    out["attention_mask"] = ids.attention_mask;
  } else {
    ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("input-ids")));
    RETURN_IF_ERROR(CheckWanInputs(inputs, encoder->config().vocab_size, args.Get("input-ids")));
    at::Tensor mask = inputs.count("attention_mask") ? inputs["attention_mask"] : at::Tensor();
    out["input_ids"] = inputs["input_ids"].to(at::kLong);
    ASSIGN_OR_RETURN(out["prompt_embeds"], encoder->Encode(out["input_ids"], mask));
  }
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), out));
  std::printf("wrote %s: input_ids [%s], prompt_embeds [%s] (umT5, tokenize + encode %.1f ms)\n",
              args.Get("output").c_str(), absl::StrJoin(out["input_ids"].sizes(), ", ").c_str(),
              absl::StrJoin(out["prompt_embeds"].sizes(), ", ").c_str(), ms);
  return absl::OkStatus();
}

}  // namespace baton
