// The scaled-down FLUX.2 transformer bench_memory and bench_pipeline train: the shape their flags give and the
// config it makes (head_dim 64, 128 latent channels, 4 RoPE axes of 16).
#pragma once

#include <cstdint>

#include "core/model/flux2_config.h"

namespace baton {

struct Flux2BenchShape {
  int64_t dim = 0;  // hidden size D, a multiple of 64
  int64_t double_blocks = 0, single_blocks = 0;
  int64_t joint = 0;  // joint_attention_dim
  int64_t grid = 0;   // latent grid side: grid² image tokens per sample
  int64_t text = 0;   // text tokens per sample
};

inline Flux2Config Flux2BenchConfig(const Flux2BenchShape& s) {
  Flux2Config c;
  c.in_channels = 128;
  c.num_layers = s.double_blocks;
  c.num_single_layers = s.single_blocks;
  c.attention_head_dim = 64;
  c.num_attention_heads = s.dim / 64;
  c.joint_attention_dim = s.joint;
  c.axes_dims_rope = {16, 16, 16, 16};
  return c;
}

}  // namespace baton
