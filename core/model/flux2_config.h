// FLUX.2 transformer configuration, read from a diffusers transformer `config.json` with the same field
// names and defaults as diffusers' Flux2Transformer2DModel. Pure data: no libtorch, so the planner can size
// FLUX.2-dev (32 B parameters) without allocating anything.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

struct Flux2Config {
  int64_t patch_size = 1;
  int64_t in_channels = 128;
  int64_t out_channels = 0;        // 0 = in_channels (diffusers: None)
  int64_t num_layers = 8;          // double-stream blocks
  int64_t num_single_layers = 48;  // single-stream blocks
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 48;
  int64_t joint_attention_dim = 15360;
  int64_t timestep_guidance_channels = 256;
  double mlp_ratio = 3.0;
  std::vector<int64_t> axes_dims_rope = {32, 32, 32, 32};
  double rope_theta = 2000.0;
  double eps = 1e-6;
  bool guidance_embeds = true;  // klein models have no guidance embedder

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t mlp_hidden_dim() const { return static_cast<int64_t>(inner_dim() * mlp_ratio); }
  int64_t out_dim() const { return patch_size * patch_size * (out_channels > 0 ? out_channels : in_channels); }
  int64_t num_blocks() const { return num_layers + num_single_layers; }
  bool IsDoubleBlock(int64_t global_index) const { return global_index < num_layers; }

  // Parameter counts (exact, from the module definitions).
  int64_t DoubleBlockParams() const;
  int64_t SingleBlockParams() const;
  int64_t EmbedderParams() const;  // x_embedder + context_embedder (stage 0)
  int64_t HeadParams() const;      // norm_out.linear + proj_out (last stage)
  int64_t ShellParams() const;     // time_guidance_embed + the three shared modulations + norm_out.linear
  int64_t TotalParams() const;

  // Checks internal consistency (rope axes sum to head_dim, positive sizes, ...).
  absl::Status Validate() const;
};

// Parses diffusers config.json text. Unknown diffusers bookkeeping keys (`_class_name`,
// `_diffusers_version`, ...) are ignored; a wrong type is an error naming the field.
absl::StatusOr<Flux2Config> ParseFlux2Config(const std::string& json_text);
absl::StatusOr<Flux2Config> LoadFlux2Config(const std::string& path);
std::string Flux2ConfigToJson(const Flux2Config& config);

// Blocks [block_begin, block_end) by kind: "double 0-7, single 0-11" (single-stream blocks numbered from 0, as in
// diffusers).
std::string DescribeBlocks(const Flux2Config& config, int64_t block_begin, int64_t block_end);

}  // namespace baton
