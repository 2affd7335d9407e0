// Masked loss on the encoder's side: a sample's mask image (dir/stem.mask.png, .jpg or .jpeg beside the image; the
// choice and why in docs/jobs.md) found, checked, and averaged onto the latent grid the cache record stores
// (CacheSample::loss_mask), so the trainer weights each token's loss by how white its cell is.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/image/image.h"

namespace baton {

// The mask file of the sample image `image_name` among the folder's file names (sorted): its stem + ".mask.png",
// ".mask.jpg" or ".mask.jpeg" in any case; "" when none; InvalidArgument naming both when there are two (cat.mask.png
// and cat.mask.jpg).
absl::StatusOr<std::string> FindMaskFile(const std::string& image_name, const std::vector<std::string>& names);

// InvalidArgument naming `path` unless the decoded mask is gray-scale (R = G = B at every pixel), `width` x `height`
// (its image's size) and white somewhere (a black mask would train nothing).
absl::Status CheckMaskImage(const Image& mask, int width, int height, const std::string& path);

// A mask already resized and cropped as its image was (to the bucket) → [grid_h, grid_w] fp32 in [0, 1]: the mean of
// each cell of (height / grid_h) x (width / grid_w) pixels, white = 1.
at::Tensor MaskOnLatentGrid(const Image& sized_mask, int64_t grid_h, int64_t grid_w);

}  // namespace baton
