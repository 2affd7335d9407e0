#include "core/sample/flux2_references.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>

#include "core/data/cache.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<Image> Flux2ReferenceImage(const Image& image, const std::string& name) {
  constexpr double kMaxArea = 1024.0 * 1024.0;
  // Flux2ImageProcessor.check_image_input's bounds: sides of 64 pixels at least, aspect ratio at most 8.
  const int long_side = std::max(image.width, image.height), short_side = std::min(image.width, image.height);
  if (short_side < 64 || long_side > 8 * short_side) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": a reference image of ", image.width, "x", image.height,
                                                   " pixels; Flux2Pipeline takes sides of 64 pixels or more and an "
                                                   "aspect ratio of 8 at most"));
  }
  Image sized = image;
  const double area = static_cast<double>(image.width) * static_cast<double>(image.height);
  if (area > kMaxArea) {  // Flux2ImageProcessor._resize_to_target_area
    const double scale = std::sqrt(kMaxArea / area);
    sized = ResizeImage(image, static_cast<int>(image.width * scale), static_cast<int>(image.height * scale));
  }
  return CenterCrop(sized, sized.width / 16 * 16, sized.height / 16 * 16);
}

absl::StatusOr<Flux2References> EncodeFlux2References(Flux2VaeEncoder& vae, const std::vector<std::string>& paths) {
  if (static_cast<int64_t>(paths.size()) > kMaxReferences) {
    return absl::InvalidArgumentError(
        absl::StrCat(paths.size(), " reference images: at most ", kMaxReferences, " per sample"));
  }
  Flux2References out;
  std::vector<at::Tensor> tokens;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(Image image, ReadImageFile(path));
    ASSIGN_OR_RETURN(Image sized, Flux2ReferenceImage(image, path));
    ASSIGN_OR_RETURN(at::Tensor mean, vae.EncodeMean(ImageToPixels(sized)));  // retrieve_latents(..., "argmax")
    at::Tensor packed;
    RETURN_IF_ERROR(TorchCall("patchifying a reference image", [&] { packed = vae.PatchifyAndNormalize(mean); }));
    tokens.push_back(packed.to(at::kCPU, at::kFloat));
    out.grids.emplace_back(sized.height / 16, sized.width / 16);
  }
  if (!tokens.empty()) out.tokens = at::cat(tokens, 1).contiguous();
  return out;
}

}  // namespace baton
