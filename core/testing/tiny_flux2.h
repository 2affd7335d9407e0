// Test helpers: tiny FLUX.2 configs and inputs, so model tests run in milliseconds on CPU.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "core/model/flux2_config.h"
#include "core/model/flux2_model.h"

namespace baton::test_util {

// D = 16 (2 heads × 8), 2 double + 3 single blocks, in_channels 4, joint_attention_dim 12.
Flux2Config TinyFlux2Config(bool guidance = true);

struct TinyInputs {
  at::Tensor hidden_states;          // [B, h·w, C]
  at::Tensor encoder_hidden_states;  // [B, L, J]
  at::Tensor timestep, guidance;     // [B]
  at::Tensor img_ids, txt_ids;       // [h·w, 4], [L, 4]
};
TinyInputs MakeTinyInputs(const Flux2Config& c, int64_t batch, int64_t h, int64_t w, int64_t text_len, uint64_t seed,
                          at::ScalarType dtype = at::kFloat);

// Loads RandomFlux2StateDict(c, seed) into a module whose parameter names are diffusers names.
void LoadRandomWeights(torch::nn::Module& module, const Flux2Config& c, uint64_t seed);

// A fresh directory under the test temp dir.
std::string MakeTempDir(const std::string& name);

}  // namespace baton::test_util
