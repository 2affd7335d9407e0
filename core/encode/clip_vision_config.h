// Configuration of Wan 2.1 I2V's image encoder, transformers' CLIPVisionModel, read from a diffusers pipeline's
// `image_encoder/config.json` (model_type "clip_vision_model"; a full CLIPConfig's `vision_config` is read too).
// Absent fields take CLIPVisionConfig's defaults, as from_pretrained does.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>

namespace baton {

// The MLP's activation (config.hidden_act, as transformers' ACT2FN names it).
enum class ClipActivation {
  kQuickGelu,  // "quick_gelu": x * sigmoid(1.702 x) (OpenAI CLIP)
  kGeluErf,    // "gelu", "gelu_python" (laion CLIP-ViT-H-14, Wan 2.1)
  kGeluTanh,   // "gelu_new", "gelu_pytorch_tanh", "gelu_fast"
  kRelu,
  kSilu,  // "silu", "swish"
};

struct ClipVisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t projection_dim = 512;  // unused by the vision tower; kept so a written config round-trips
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 224;
  int64_t patch_size = 32;
  std::string hidden_act = "quick_gelu";
  double layer_norm_eps = 1e-5;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t grid() const { return image_size / patch_size; }       // patches per side
  int64_t num_positions() const { return grid() * grid() + 1; }  // patches + the class token
  absl::StatusOr<ClipActivation> activation() const;
  absl::Status Validate() const;
};

absl::StatusOr<ClipVisionConfig> ParseClipVisionConfig(absl::string_view json_text, absl::string_view source);
absl::StatusOr<ClipVisionConfig> LoadClipVisionConfig(const std::string& config_json_path);
// A config.json that CLIPVisionModel.from_pretrained reads back as `config`.
std::string ClipVisionConfigToJson(const ClipVisionConfig& config);

// ViT-H/14 at 224 as Wan 2.1 I2V ships it (laion CLIP-ViT-H-14): hidden 1280, 32 layers, 16 heads, MLP 5120,
// patch 14, gelu, projection 1024. Its penultimate hidden states are [B, 257, 1280].
ClipVisionConfig ClipVitH14Config();
// A tiny stand-in for tests and tiny pipelines: hidden 32, 3 layers, 4 heads, MLP 48, patch 4, image 16 (17 tokens).
ClipVisionConfig TinyClipVisionConfig();

}  // namespace baton
