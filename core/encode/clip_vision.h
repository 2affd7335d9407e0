// Wan 2.1 I2V's image encoder: transformers' CLIPVisionModel, returning what WanImageToVideoPipeline.encode_image
// gives the transformer, `hidden_states[-2]` (the input of the last layer; no post-layernorm). Weights come from a
// pipeline's image_encoder/ (model.safetensors or shards + index). Also writes random ones for tests.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/encode/clip_vision_config.h"

namespace baton {

// Per layer, as CLIPEncoderLayer: h += out_proj(attention(layer_norm1(h))); h += fc2(act(fc1(layer_norm2(h)))), with
// attention scaled by head_dim^-0.5 (no mask, no dropout). Before the layers: patch conv (stride = patch, no bias),
// the class token first, + position_embedding[0 .. (S/p)^2], then pre_layrnorm. The last layer is neither loaded nor
// run: its output is not wanted. Weights are copied once out of the memory-mapped files into `dtype` on `device`
// (ViT-H/14 without its last layer: 1.2 GB bf16). Immutable after Load: PenultimateHiddenStates may run on several
// threads at once.
class ClipVisionEncoder {
 public:
  // `dir`: a CLIPVisionModel folder (config.json + weights), e.g. a pipeline's image_encoder/. Keys are
  // `vision_model.*` (transformers 4.x, the published Wan checkpoints; also a whole CLIPModel, whose text tower is
  // ignored) or bare `embeddings.* / pre_layrnorm.* / encoder.*` (transformers 5's save_pretrained). Every missing
  // or mis-shaped tensor is named in one INVALID_ARGUMENT; post_layernorm and visual_projection are ignored.
  // `dtype`: kFloat, kBFloat16, kHalf (or kDouble): computed in that dtype, as the model loaded with torch_dtype.
  static absl::StatusOr<std::unique_ptr<ClipVisionEncoder>> Load(const std::string& dir, at::ScalarType dtype,
                                                                 at::Device device);

  const ClipVisionConfig& config() const { return config_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  // Tokens per image: 1 + (image_size / patch_size)^2 (257 for ViT-H/14 at 224).
  int64_t tokens() const { return config_.num_positions(); }

  // pixel_values [B, num_channels, image_size, image_size] (ClipImageProcessor's output; any float dtype and
  // device) → hidden_states[-2] [B, tokens(), hidden_size] fp32 on device() (values of the compute dtype).
  // INVALID_ARGUMENT for another shape (transformers raises on a size other than image_size too).
  absl::StatusOr<at::Tensor> PenultimateHiddenStates(const at::Tensor& pixel_values) const;

 private:
  struct Layer {
    at::Tensor ln1_w, ln1_b;                            // [D]
    at::Tensor q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;  // [D, D], [D]
    at::Tensor ln2_w, ln2_b;                            // [D]
    at::Tensor fc1_w, fc1_b, fc2_w, fc2_b;              // [I, D], [I], [D, I], [D]
  };
  ClipVisionEncoder() = default;

  ClipVisionConfig config_;
  ClipActivation activation_ = ClipActivation::kQuickGelu;
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
  at::Tensor class_embedding_;      // [D]
  at::Tensor patch_embedding_;      // [D, C, p, p]
  at::Tensor position_embedding_;   // [1 + (S/p)^2, D]
  at::Tensor pre_ln_w_, pre_ln_b_;  // [D]
  std::vector<Layer> layers_;       // num_hidden_layers - 1
};

// Where a Wan 2.1 I2V pipeline keeps its CLIP parts. `model_dir`: the pipeline folder (image_encoder/ +
// image_processor/) or the image_encoder/ folder itself, whose processor is then its own preprocessor_config.json or
// ../image_processor/'s. image_processor is "" when there is none (pixel_values must then come preprocessed).
struct ClipFolders {
  std::string image_encoder;
  std::string image_processor;  // the preprocessor_config.json file
};
absl::StatusOr<ClipFolders> FindClipFolders(const std::string& model_dir);

struct RandomClipVisionOptions {
  bool vision_model_prefix = true;  // `vision_model.*` keys (the published checkpoints); false: bare (transformers 5)
  bool bf16 = false;                // stored dtype
  int64_t max_shard_bytes = 0;      // > 0: shards + model.safetensors.index.json
};
// Writes `dir`/config.json and model.safetensors with random weights in CLIPVisionModel's layout (post_layernorm
// included, so from_pretrained finds every key). Layer norms near 1 with small biases, matrices ~ 1/sqrt(fan_in),
// so the hidden states stay O(1) through the layers. Each tensor is drawn from MixSeed(seed, HashName(its name)).
absl::Status WriteRandomClipVision(const ClipVisionConfig& config, const std::string& dir, uint64_t seed,
                                   const RandomClipVisionOptions& options = {});

// A Wan 2.1 I2V pipeline's two CLIP folders: `pipeline_dir`/image_encoder/ (WriteRandomClipVision) and
// `pipeline_dir`/image_processor/preprocessor_config.json (CLIPImageProcessor's defaults, bicubic, with the shortest
// edge and the crop at config.image_size).
absl::Status WriteRandomClipPipelineFolders(const ClipVisionConfig& config, const std::string& pipeline_dir,
                                            uint64_t seed);

}  // namespace baton
