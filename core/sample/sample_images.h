// Decoded pixels → images on disk: diffusers' postprocess (x/2 + 0.5, clamped to [0, 1], ·255 rounded to 8 bits)
// and a contact sheet that puts a step's samples side by side.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "core/image/image.h"

namespace baton {

// pixels [3, H, W] (one image of Flux2VaeDecoder's output) → RGB8, exactly as VaeImageProcessor.postprocess
// followed by numpy_to_pil rounds it.
Image PixelsToImage(const at::Tensor& pixels);

// The images in a grid of `columns` (≤ 0: about square), row-major, separated by a 4-pixel white border; images of
// different sizes are centred in cells of the largest.
Image ContactSheet(const std::vector<Image>& images, int columns = 0);

}  // namespace baton
