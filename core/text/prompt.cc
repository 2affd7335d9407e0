#include "core/text/prompt.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_replace.h>

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

const char kFlux2SystemMessage[] =
    "You are an AI that reasons about image descriptions. You give structured responses focusing on object "
    "relationships, object\nattribution and actions without speculation.";

std::string RenderFlux2Prompt(absl::string_view prompt, TextEncoderFamily family) {
  if (family == TextEncoderFamily::kMistral3) {
    // format_input() strips "[IMG]" (the processor would otherwise count image tokens); the template
    // writes bos_token itself, so tokenization adds none.
    const std::string cleaned = absl::StrReplaceAll(prompt, {{"[IMG]", ""}});
    return absl::StrCat("<s>[SYSTEM_PROMPT]", kFlux2SystemMessage, "[/SYSTEM_PROMPT][INST]", cleaned, "[/INST]");
  }
  // Qwen3's template for one user message, add_generation_prompt=True, enable_thinking=False.
  return absl::StrCat("<|im_start|>user\n", prompt, "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

PaddingSide Flux2PaddingSide(TextEncoderFamily family) {
  return family == TextEncoderFamily::kMistral3 ? PaddingSide::kLeft : PaddingSide::kRight;
}

absl::StatusOr<std::optional<PaddingSide>> ReadTokenizerPaddingSide(const std::string& tokenizer_config_path) {
  if (!PathExists(tokenizer_config_path)) return std::optional<PaddingSide>();
  ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_config_path));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(tokenizer_config_path, ": not a JSON object"));
  }
  auto it = j.find("padding_side");
  if (it == j.end() || it->is_null()) return std::optional<PaddingSide>();
  if (*it == "left") return std::optional<PaddingSide>(PaddingSide::kLeft);
  if (*it == "right") return std::optional<PaddingSide>(PaddingSide::kRight);
  return absl::InvalidArgumentError(
      absl::StrCat(tokenizer_config_path, ": padding_side is ", it->dump(), ", expected \"left\" or \"right\""));
}

absl::StatusOr<PromptIds> BuildFlux2PromptIds(const BpeTokenizer& tok, absl::string_view prompt,
                                              TextEncoderFamily family, int64_t max_length,
                                              std::optional<PaddingSide> padding_side) {
  if (max_length < 1) return absl::InvalidArgumentError(absl::StrCat("max_length ", max_length, " < 1"));
  if (!tok.pad_id().has_value()) {
    return absl::FailedPreconditionError("the tokenizer has no pad token (tokenizer_config.json pad_token)");
  }
  std::vector<int64_t> ids = tok.Encode(RenderFlux2Prompt(prompt, family));
  if (static_cast<int64_t>(ids.size()) > max_length) ids.resize(max_length);  // truncation_side "right"
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t pad = max_length - n;
  const bool left = padding_side.value_or(Flux2PaddingSide(family)) == PaddingSide::kLeft;

  PromptIds out;
  out.length = n;
  out.input_ids = at::full({1, max_length}, *tok.pad_id(), at::kLong);
  out.attention_mask = at::zeros({1, max_length}, at::kLong);
  const int64_t start = left ? pad : 0;
  auto id_acc = out.input_ids.accessor<int64_t, 2>();
  auto mask_acc = out.attention_mask.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    id_acc[0][start + i] = ids[i];
    mask_acc[0][start + i] = 1;
  }
  return out;
}

std::vector<int64_t> Flux2HiddenStateLayers(TextEncoderFamily family) {
  if (family == TextEncoderFamily::kMistral3) return {10, 20, 30};
  return {9, 18, 27};
}

absl::StatusOr<TextEncoderFamily> Flux2FamilyForConfig(const TextEncoderConfig& config) {
  if (config.model_type == "mistral") return TextEncoderFamily::kMistral3;
  if (config.model_type == "qwen3") return TextEncoderFamily::kQwen3;
  return absl::InvalidArgumentError(absl::StrCat("text encoder model_type '", config.model_type,
                                                 "' is neither FLUX.2-dev's (mistral) nor klein's (qwen3)"));
}

absl::StatusOr<at::Tensor> EncodeFlux2Prompt(TextEncoder& encoder, const PromptIds& ids, TextEncoderFamily family) {
  ASSIGN_OR_RETURN(TextEncoderFamily config_family, Flux2FamilyForConfig(encoder.config()));
  if (config_family != family) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt built for the ", family == TextEncoderFamily::kMistral3 ? "Mistral3" : "Qwen3",
                     " template but the text encoder is '", encoder.config().model_type, "'"));
  }
  return encoder.Encode(ids.input_ids, ids.attention_mask, Flux2HiddenStateLayers(family));
}

}  // namespace baton
