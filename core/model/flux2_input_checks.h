// What `baton forward` and ModelFamily::CheckModelInputs accept as FLUX.2 model inputs (diffusers' argument names):
// every key, rank, size and dtype checked before a tensor reaches the model, so a malformed file is a clear error
// naming the file and the tensor, never a libtorch abort.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <map>
#include <string>

#include "core/model/flux2_config.h"

namespace baton {

// hidden_states [B, S_img, in_channels] and encoder_hidden_states [B, S_txt, joint_attention_dim] (floating point,
// B, S > 0), img_ids / txt_ids [S, axes] or [B, S, axes] (numeric), timestep (and guidance when the model has a
// guidance embedder) a scalar or [B] or [1] (numeric). `path` names the source in errors.
absl::Status CheckFlux2ForwardInputs(const std::map<std::string, at::Tensor>& inputs, const Flux2Config& c,
                                     const std::string& path);

}  // namespace baton
