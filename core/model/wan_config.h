// Wan 2.x transformer configuration, read from a diffusers transformer `config.json` with the field names and
// defaults of diffusers' WanTransformer3DModel, or from an original Wan `config.json` (dim, num_heads, in_dim,
// model_type, ...; converted as diffusers' scripts/convert_wan_to_diffusers.py does). Pure data: no libtorch,
// so the planner can size Wan 2.2 A14B without allocating anything.
#pragma once

#include <absl/status/statusor.h>

#include <array>
#include <cstdint>
#include <string>

namespace baton {

struct WanConfig {
  std::array<int64_t, 3> patch_size = {1, 2, 2};  // (t, h, w)
  int64_t num_attention_heads = 40;
  int64_t attention_head_dim = 128;
  int64_t in_channels = 16;
  int64_t out_channels = 16;  // 0 = in_channels (diffusers: None)
  int64_t text_dim = 4096;
  int64_t freq_dim = 256;
  int64_t ffn_dim = 13824;
  int64_t num_layers = 40;
  bool cross_attn_norm = true;
  std::string qk_norm = "rms_norm_across_heads";
  double eps = 1e-6;
  int64_t image_dim = 0;          // 0 = no CLIP image branch (diffusers: None); Wan 2.1 I2V: 1280
  int64_t added_kv_proj_dim = 0;  // 0 = none; Wan 2.1 I2V: inner_dim
  int64_t rope_max_seq_len = 1024;
  int64_t pos_embed_seq_len = 0;  // 0 = none; FLF2V: 2·257

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t out_dim() const { return out_channels > 0 ? out_channels : in_channels; }
  int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
  int64_t num_blocks() const { return num_layers; }
  bool has_image_branch() const { return image_dim > 0; }
  // diffusers WanRotaryPosEmbed: h = w = 2·(Dh // 6), t = the rest (128 → 44/42/42).
  int64_t rope_h_dim() const { return 2 * (attention_head_dim / 6); }
  int64_t rope_t_dim() const { return attention_head_dim - 2 * rope_h_dim(); }

  // Parameter counts (exact, from diffusers' module definitions).
  int64_t BlockParams() const;        // one WanTransformerBlock
  int64_t BlockLinearParams() const;  // of which Linear weights (what 8-bit storage would shrink)
  int64_t EmbedderParams() const;     // patch_embedding (first stage)
  int64_t HeadParams() const;         // proj_out + scale_shift_table (last stage)
  int64_t ShellParams() const;        // condition_embedder (time, text, image)
  int64_t TotalParams() const;

  absl::Status Validate() const;
};

// Parses config.json text. A diffusers config (`_class_name` WanTransformer3DModel, or `num_attention_heads`
// present) is read as is; an original Wan config (`dim`, `num_heads`, `model_type`) is converted.
absl::StatusOr<WanConfig> ParseWanConfig(const std::string& json_text);
absl::StatusOr<WanConfig> LoadWanConfig(const std::string& path);
// diffusers layout, `_class_name` WanTransformer3DModel.
std::string WanConfigToJson(const WanConfig& config);

}  // namespace baton
