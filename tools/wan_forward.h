// `baton forward` for Wan models (config.json `_class_name` WanTransformer3DModel or WanModel): diffusers'
// WanTransformer3DModel.forward on inputs from a safetensors file.
#pragma once

#include <absl/status/status.h>

#include "client/args.h"

namespace baton {

// Inputs: hidden_states [B, C, F, H, W], timestep [B] (0..1000) or [B, S] (TI2V, per token),
// encoder_hidden_states [B, L, text_dim], encoder_hidden_states_image (Wan 2.1 I2V). Output key "output".
absl::Status WanForward(const Args& args);

}  // namespace baton
