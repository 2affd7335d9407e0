// `baton text-encode` for a Wan pipeline folder (text_encoder/config.json of model_type umt5): the prompt path
// of WanPipeline._get_t5_prompt_embeds (core/text/wan_prompt.h), or raw ids straight into UMT5EncoderModel.
#pragma once

#include <absl/status/status.h>

#include <string>

#include "client/commands.h"

namespace baton {

// True when `model`/text_encoder/config.json is a umT5 config.
bool IsUmt5Pipeline(const std::string& model);

// --prompt: writes input_ids [1, max], attention_mask [1, max], prompt_embeds [1, max, d_model] (zeros past
// the real tokens). --input-ids: a safetensors with input_ids [B, L] (and optionally attention_mask [B, L]);
// writes input_ids and prompt_embeds = last_hidden_state [B, L, d_model].
absl::Status WanTextEncode(const Args& args);

}  // namespace baton
