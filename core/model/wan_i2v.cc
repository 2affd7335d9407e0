#include "core/model/wan_i2v.h"

#include <absl/strings/str_cat.h>

#include "core/tensor/shape.h"

namespace baton {

bool IsWanConditioning(const std::string& kind) {
  return kind == kWanFirstFrame || kind == kWanFirstLastFrame || kind == kWanCleanFirstFrame;
}

int64_t WanConditionChannels(const std::string& kind, int64_t z_dim) {
  return kind == kWanCleanFirstFrame ? z_dim : 4 + z_dim;
}

at::Tensor WanConditionMask(int64_t latent_frames, int64_t h, int64_t w, bool keep_last, int64_t temporal_factor) {
  const int64_t pixel_frames = temporal_factor * (latent_frames - 1) + 1;
  at::Tensor given = at::zeros({pixel_frames}, at::kFloat);
  given[0] = 1;
  if (keep_last) given[pixel_frames - 1] = 1;
  // Frame 0 repeated temporal_factor times, then the rest: temporal_factor·F' entries, folded [F', temporal_factor].
  at::Tensor expanded = at::cat({given.slice(0, 0, 1).repeat({temporal_factor}), given.slice(0, 1)});
  at::Tensor per_frame = expanded.view({latent_frames, temporal_factor}).t();  // [4, F']
  return per_frame.view({temporal_factor, latent_frames, 1, 1}).expand({temporal_factor, latent_frames, h, w}).clone();
}

absl::Status CheckWanConditioningFits(const WanConfig& c, int64_t latent_channels, const std::string& kind,
                                      int64_t condition_channels, int64_t image_dim) {
  const int64_t z = latent_channels;
  if (c.out_dim() != z) {
    return absl::InvalidArgumentError(
        absl::StrCat("latent channels ", z, " vs the model's out_channels ", c.out_dim()));
  }
  if (kind.empty()) {
    if (c.in_channels == z) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "the model takes ", c.in_channels, " input channels (", z, " noisy + ", c.in_channels - z,
        " image-to-video conditioning), the cache has no conditioning: encode the dataset with encoder_worker --model "
        "on this image-to-video pipeline folder (it caches the first frame's conditioning)"));
  }
  if (!IsWanConditioning(kind)) {
    return absl::InvalidArgumentError(absl::StrCat("conditioning '", kind, "' is not a Wan kind (", kWanFirstFrame,
                                                   ", ", kWanFirstLastFrame, ", ", kWanCleanFirstFrame, ")"));
  }
  const int64_t want = WanConditionChannels(kind, z);
  if (condition_channels != want) {
    return absl::InvalidArgumentError(absl::StrCat("conditioning ", kind, " has ", condition_channels, " channels, ",
                                                   want, " expected for ", z, " latent channels"));
  }
  const int64_t input = kind == kWanCleanFirstFrame ? z : z + want;
  if (c.in_channels != input) {
    return absl::InvalidArgumentError(absl::StrCat("conditioning ", kind, " gives the transformer ", input,
                                                   " input channels, the model takes ", c.in_channels));
  }
  if (image_dim != c.image_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the cache's image embeddings are ", image_dim, " wide, the model's image branch takes ", c.image_dim,
        c.image_dim > 0 ? " (Wan 2.1 image-to-video: the encoder worker needs the pipeline's image_encoder/)" : ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> WanConditionedInput(const std::string& kind, const at::Tensor& noisy,
                                               const at::Tensor& condition) {
  const bool shape_ok = noisy.dim() == 5 && condition.dim() == 5 && condition.size(0) == noisy.size(0) &&
                        condition.size(3) == noisy.size(3) && condition.size(4) == noisy.size(4);
  if (kind == kWanCleanFirstFrame) {
    if (!shape_ok || condition.size(1) != noisy.size(1) || condition.size(2) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("clean first frame: condition ", ShapeString(condition.sizes()),
                                                     " for latents ", ShapeString(noisy.sizes()),
                                                     ", expected [b, C, 1, h, w]"));
    }
    return at::cat({condition.to(noisy.scalar_type()), noisy.slice(2, 1)}, 2);
  }
  if (!IsWanConditioning(kind) || !shape_ok || condition.size(2) != noisy.size(2)) {
    return absl::InvalidArgumentError(absl::StrCat("conditioning '", kind, "': condition ",
                                                   ShapeString(condition.sizes()), " for latents ",
                                                   ShapeString(noisy.sizes()), ", expected [b, cc, F, h, w]"));
  }
  return at::cat({noisy, condition.to(noisy.scalar_type())}, 1);
}

at::Tensor WanExpandedTimesteps(const WanConfig& c, const at::Tensor& timestep, int64_t frames, int64_t h, int64_t w) {
  // Every released Wan has patch_size[0] = 1: a latent frame is one token row.
  const int64_t per_frame = (h / c.patch_size[1]) * (w / c.patch_size[2]);
  at::Tensor t = timestep.to(at::kFloat).view({-1, 1}).expand({timestep.size(0), frames * per_frame}).clone();
  t.slice(1, 0, per_frame).zero_();
  return t;
}

at::Tensor WanFirstFrameLossMask(int64_t batch, int64_t frames) {
  at::Tensor mask = at::ones({batch, 1, frames, 1, 1}, at::kFloat);
  mask.select(2, 0).zero_();
  return mask;
}

}  // namespace baton
