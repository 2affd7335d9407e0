// The interface between a dataset and the models that encode it: one sample (a bucket-sized image and its
// caption) in, the tensors the transformer trains on out. The cache builder (encoder_worker/) drives it; the
// FLUX.2 implementation is Flux2SampleEncoder (flux2_encoder.h), Wan's WanSampleEncoder (wan_encoder.h, clips).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include <cstdint>
#include <string>

#include "core/image/image.h"

namespace baton {

// A clip's image-to-video conditioning (core/data/cache.h "condition", "image_embeds"); undefined when not used.
struct ClipConditioning {
  at::Tensor condition;     // [condition_channels, F' or 1, H', W'] fp32
  at::Tensor image_embeds;  // [tokens, image_dim] fp32
};

// What turns one sample into cache tensors. The real one is Flux2SampleEncoder (VAE + text encoder).
class SampleEncoder {
 public:
  virtual ~SampleEncoder() = default;
  // Names the models and settings; a record made by another identity is re-encoded.
  virtual std::string identity() const = 0;
  virtual int64_t latent_channels() const = 0;
  virtual int64_t text_dim() const = 0;
  // image: already resized/cropped to its bucket → packed latents [grid_h·grid_w, C] fp32.
  virtual absl::StatusOr<at::Tensor> EncodeImage(const Image& image) = 0;
  // caption → prompt embeddings [L, J] fp32.
  virtual absl::StatusOr<at::Tensor> EncodeText(const std::string& caption) = 0;
  // Video families (Wan): a bucketed clip, pixels [1, 3, F, H, W] fp32 in [-1, 1] (F = 4k+1, core/video's
  // BucketClipToPixels) → normalised latents [C, F', H', W'] fp32. Image-only families do not override it.
  virtual bool encodes_video() const { return false; }
  virtual absl::StatusOr<at::Tensor> EncodeVideo(const at::Tensor& pixels) {
    (void)pixels;
    return absl::UnimplementedError(absl::StrCat("encoder ", identity(), " does not encode video"));
  }
  // Image-to-video: the kind of conditioning every record carries ("" = none; core/model/wan_i2v.h), its channels and
  // the image embeddings' width (0 = none), and a bucketed clip's conditioning (the same pixels EncodeVideo takes).
  virtual std::string conditioning() const { return ""; }
  virtual int64_t condition_channels() const { return 0; }
  virtual int64_t image_dim() const { return 0; }
  virtual absl::StatusOr<ClipConditioning> EncodeConditioning(const at::Tensor& pixels) {
    (void)pixels;
    return absl::UnimplementedError(absl::StrCat("encoder ", identity(), " builds no image-to-video conditioning"));
  }
};

}  // namespace baton
