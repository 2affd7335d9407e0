// FLUX.2 reference images at sampling time (editing), prepared as Flux2Pipeline.__call__ prepares `image=[...]`: each
// image cropped to multiples of 16, VAE-encoded (posterior mode), patchified, BatchNorm-normalised and packed. The
// sampler appends their tokens to the noisy latents' with Flux2Pipeline's position ids (ModelFamily::MicroBatchInputs)
// and keeps the prediction of the target's tokens only.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/image/image.h"
#include "core/vae/flux2_vae.h"

namespace baton {

struct Flux2References {
  at::Tensor tokens;                               // [1, Σ h·w, C] fp32, reference after reference
  std::vector<std::pair<int64_t, int64_t>> grids;  // each reference's latent token grid (h, w): pixels / 16
  bool empty() const { return grids.empty(); }
  int64_t token_count() const { return tokens.defined() ? tokens.size(1) : 0; }
};

// Flux2Pipeline's preprocessing of one reference image: an image over 1024·1024 pixels is first resized to about
// that area (int(w·s) x int(h·s), s = sqrt(1024² / (w·h))); then each side is floored to a multiple of 16 and the
// image center-cropped to it (Flux2ImageProcessor._resize_and_crop). The resize uses Baton's resampler (area
// averaging), not PIL's Lanczos, so only images over 1 MP differ from Flux2Pipeline's (by the resampling).
// InvalidArgument naming `name` where Flux2Pipeline refuses too: a side under 64 pixels, an aspect ratio over 8.
absl::StatusOr<Image> Flux2ReferenceImage(const Image& image, const std::string& name);

// Reads, prepares and encodes each reference image file, in order (at most kMaxReferences, core/data/cache.h).
// Errors name the file.
absl::StatusOr<Flux2References> EncodeFlux2References(Flux2VaeEncoder& vae, const std::vector<std::string>& paths);

}  // namespace baton
