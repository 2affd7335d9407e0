// Checks of the inputs files `baton forward`, `baton vae-encode` and `baton text-encode` read: every key, rank,
// size and dtype is checked before a tensor reaches the model, so a malformed file is a clear error naming
// the file and the tensor (exit 1), never a libtorch abort.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <map>
#include <string>

#include "core/model/flux2_config.h"

namespace baton {

// forward: hidden_states [B, S_img, in_channels] and encoder_hidden_states [B, S_txt, joint_attention_dim]
// (floating point, B, S > 0), img_ids / txt_ids [S, axes] or [B, S, axes] (numeric), timestep (and guidance when
// the model has a guidance embedder) a scalar or [B] or [1] (numeric).
absl::Status CheckForwardInputs(const std::map<std::string, at::Tensor>& inputs, const Flux2Config& c,
                                const std::string& path);

// vae-encode: pixels [B, 3, H, W], floating point, B > 0, H and W positive multiples of `multiple`: what the VAE
// asks (Flux2VaeConfig::pixel_multiple, 16 for FLUX.2).
absl::Status CheckPixels(const std::map<std::string, at::Tensor>& inputs, int64_t multiple, const std::string& path);

// text-encode --input-ids: input_ids [1, L], L > 0, an integer dtype, every id in [0, vocab_size).
absl::Status CheckInputIds(const std::map<std::string, at::Tensor>& inputs, int64_t vocab_size,
                           const std::string& path);

}  // namespace baton
