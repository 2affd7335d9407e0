// Decoded Wan videos → files: the frames as images (diffusers' postprocess per frame, as export_to_video gets them),
// an MP4 per video, and a contact sheet with a few evenly spaced frames of each video in one row.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <string>
#include <vector>

#include "core/image/image.h"

namespace baton {

inline constexpr int kWanSampleFps = 16;  // Wan's videos play at 16 frames per second

// pixels [3, F, H, W] in [-1, 1] (one video of WanVaeDecoder::Decode) → F RGB8 frames (PixelsToImage each).
std::vector<Image> VideoFrames(const at::Tensor& pixels);

// Writes the frames as a video at `fps` (the container from the extension, .mp4).
absl::Status WriteSampleVideo(const std::string& path, const std::vector<Image>& frames, int fps = kWanSampleFps);

// `per_video` frames of each video (first, last and evenly between; all of a shorter video), one row per video.
Image VideoContactSheet(const std::vector<std::vector<Image>>& videos, int per_video = 4);

}  // namespace baton
