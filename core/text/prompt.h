// FLUX.2's prompt → token ids → text embeddings, as diffusers does it: Flux2Pipeline (dev, Mistral3) and
// Flux2KleinPipeline (Qwen3), each with its chat template, padding side and hidden-state layers (below).
// Embeddings keep the padding positions, as diffusers returns them.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/text/text_encoder.h"
#include "core/text/tokenizer.h"

namespace baton {

// Flux2Pipeline (dev, kMistral3): the chat template of Mistral-Small-3.1 over [system message, user prompt] with
// "[IMG]" removed from the prompt, i.e. "<s>[SYSTEM_PROMPT]…[/SYSTEM_PROMPT][INST]…[/INST]", tokenized without
// extra specials, truncated (right) and padded to max_length 512 on the LEFT with <pad>, hidden states of layers
// 10, 20, 30. Flux2KleinPipeline (kQwen3): "<|im_start|>user\n…<|im_end|>\n<|im_start|>assistant\n<think>\n\n
// </think>\n\n" (add_generation_prompt, enable_thinking=False), padded on the RIGHT with the tokenizer's pad
// token (<|endoftext|>), layers 9, 18, 27.
enum class TextEncoderFamily { kMistral3, kQwen3 };
enum class PaddingSide { kLeft, kRight };

constexpr int64_t kFlux2MaxSequenceLength = 512;

// diffusers' SYSTEM_MESSAGE (pipelines/flux2/system_messages.py). Note: diffusers' copy has a line
// break after "object" where black-forest-labs/flux2's has a space; we follow diffusers.
extern const char kFlux2SystemMessage[];

struct PromptIds {
  at::Tensor input_ids;       // [1, L] int64, L = max_length
  at::Tensor attention_mask;  // [1, L] int64, 1 = token, 0 = padding
  int64_t length = 0;         // real (unpadded) tokens after truncation
};

// The chat-templated text the tokenizer sees (for dev: with "[IMG]" removed from the prompt).
std::string RenderFlux2Prompt(absl::string_view prompt, TextEncoderFamily family);

// The padding side of the family's tokenizer: left for Mistral-Small-3.1 (LlamaTokenizerFast), right
// for Qwen3. A tokenizer_config.json `padding_side` overrides it (ReadTokenizerPaddingSide).
PaddingSide Flux2PaddingSide(TextEncoderFamily family);
// `padding_side` from a tokenizer_config.json; nullopt when the file or the field is absent.
absl::StatusOr<std::optional<PaddingSide>> ReadTokenizerPaddingSide(const std::string& tokenizer_config_path);

// Renders, tokenizes (added tokens such as "<s>" matched literally, no BOS added), truncates to
// max_length and pads to max_length with tok.pad_id() on `padding_side` (default: the family's).
// Errors: no pad token, max_length < 1.
absl::StatusOr<PromptIds> BuildFlux2PromptIds(const BpeTokenizer& tok, absl::string_view prompt,
                                              TextEncoderFamily family, int64_t max_length = kFlux2MaxSequenceLength,
                                              std::optional<PaddingSide> padding_side = std::nullopt);

std::vector<int64_t> Flux2HiddenStateLayers(TextEncoderFamily family);  // {10,20,30} | {9,18,27}

// kMistral3 for a "mistral" language model, kQwen3 for "qwen3"; an error otherwise.
absl::StatusOr<TextEncoderFamily> Flux2FamilyForConfig(const TextEncoderConfig& config);

// encode_prompt: ids → hidden states of Flux2HiddenStateLayers(family) → prompt_embeds
// [1, L, 3*hidden] fp32 (per token: layer a | layer b | layer c), padding positions kept.
absl::StatusOr<at::Tensor> EncodeFlux2Prompt(TextEncoder& encoder, const PromptIds& ids, TextEncoderFamily family);

}  // namespace baton
