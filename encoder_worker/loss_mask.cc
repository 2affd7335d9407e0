#include "encoder_worker/loss_mask.h"

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "encoder_worker/sidecar.h"

namespace baton {

absl::StatusOr<std::string> FindMaskFile(const std::string& image_name, const std::vector<std::string>& names) {
  return FindSidecar(names, std::filesystem::path(image_name).stem().string(), {".mask.png", ".mask.jpg", ".mask.jpeg"},
                     image_name, "masks");
}

absl::Status CheckMaskImage(const Image& mask, int width, int height, const std::string& path) {
  if (mask.width != width || mask.height != height) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the mask is ", mask.width, "x", mask.height, ", its image ",
                                                   width, "x", height, " (a mask covers its image)"));
  }
  bool white = false;
  for (int y = 0; y < mask.height; ++y) {
    for (int x = 0; x < mask.width; ++x) {
      const uint8_t* p = mask.at(x, y);
      if (p[0] != p[1] || p[1] != p[2]) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": the mask is not gray-scale (pixel ", x, ",", y,
                                                       " is RGB ", p[0], ",", p[1], ",", p[2], ")"));
      }
      white = white || p[0] > 0;
    }
  }
  if (!white)
    return absl::InvalidArgumentError(absl::StrCat(path, ": the mask is black everywhere: nothing would train"));
  return absl::OkStatus();
}

at::Tensor MaskOnLatentGrid(const Image& sized_mask, int64_t grid_h, int64_t grid_w) {
  at::Tensor rgb = at::from_blob(const_cast<uint8_t*>(sized_mask.pixels.data()),
                                 {sized_mask.height, sized_mask.width, 3}, at::kByte);
  at::Tensor unit = rgb.select(2, 0).to(at::kFloat) / 255.0;  // [H, W], white = 1
  at::Tensor cells = at::adaptive_avg_pool2d(unit.unsqueeze(0).unsqueeze(0), {grid_h, grid_w});
  return cells.reshape({grid_h, grid_w}).clamp(0, 1).contiguous();
}

}  // namespace baton
