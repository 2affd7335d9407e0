// What a Wan sample needs from its pipeline folder besides the prompt: which image-to-video conditioning the
// transformer takes (and so whether a first frame must be given), and that first frame as the clip
// WanSampleEncoder::EncodeConditioning encodes, as WanImageToVideoPipeline.prepare_latents builds its condition.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>

namespace baton {

// WanEncoderOptions::conditioning for sampling `pipeline`: "first-frame" for an image-to-video transformer
// (in_channels 2·z + 4) or a TI2V pipeline (model_index.json expand_timesteps) given a first frame, "none" for a
// text-to-video one without. InvalidArgument when an I2V model gets no image, or a T2V model gets one.
absl::StatusOr<std::string> WanSampleConditioning(const std::string& pipeline, bool has_image);

// An image file, or a video file's first frame, resized to width×height (as the pipeline's video_processor), at frame
// 0 of a [1, 3, frames, H, W] clip in [-1, 1] with zeros after it (the frames EncodeConditioning ignores for a
// first-frame kind).
absl::StatusOr<at::Tensor> WanFirstFramePixels(const std::string& image_path, int64_t width, int64_t height,
                                               int64_t frames);

}  // namespace baton
