// Wan's prompt -> umT5 ids -> prompt embeddings, as diffusers' WanPipeline._get_t5_prompt_embeds (each step at
// the function that does it). Baton runs the encoder on the real tokens only: padded positions are masked keys,
// so the real tokens' states are the same, and the padded rows are zeroed afterwards anyway.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>

#include "core/text/umt5_encoder.h"
#include "core/text/unigram_tokenizer.h"

namespace baton {

// WanPipeline's default is 226 (encode_prompt); its __call__ passes 512, which training uses.
constexpr int64_t kWanMaxSequenceLength = 512;

// prompt_clean: ftfy.fix_text when ftfy is installed (Baton has no ftfy: NOT applied -- the same as diffusers
// without ftfy, as in the project venv), html.unescape twice, strip; then every run of \s (regex module:
// Unicode White_Space) becomes one space, strip (Python str.strip: also \x1c-\x1f).
std::string WanPromptClean(absl::string_view prompt);

struct WanPromptIds {
  at::Tensor input_ids;       // [1, max_length] int64
  at::Tensor attention_mask;  // [1, max_length] int64
  int64_t length = 0;         // real tokens (with </s>)
};

// Cleans, tokenizes, truncates and pads as above: tokenizer(padding="max_length", max_length, truncation=True,
// add_special_tokens=True), i.e. ids truncated to max_length - 1 and </s> appended, padded on the right with <pad>
// (mask 0). Errors: max_length too small for the template's specials, no pad token.
absl::StatusOr<WanPromptIds> BuildWanPromptIds(const UnigramTokenizer& tok, absl::string_view prompt,
                                               int64_t max_length = kWanMaxSequenceLength);

// prompt_embeds [1, max_length, d_model] fp32: the real tokens' last hidden states, zeros after (diffusers:
// text_encoder(ids, mask).last_hidden_state, trimmed to the real length and zero-padded to max_length).
absl::StatusOr<at::Tensor> EncodeWanPrompt(Umt5Encoder& encoder, const WanPromptIds& ids);

}  // namespace baton
