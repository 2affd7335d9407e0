// `baton vae-encode` for a Wan VAE (vae/config.json `_class_name` AutoencoderKLWan): pixels from a safetensors file
// or a clip (video file or folder of frames, bucketed as Wan expects) → the posterior mean and the normalised
// latents the Wan transformer trains on.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string>

#include "client/args.h"

namespace baton {

// The vae/ folder of `model` (a pipeline folder or a vae/ folder itself) and its config's `_class_name`.
struct VaeFolder {
  std::string dir;
  std::string class_name;
};
absl::StatusOr<VaeFolder> FindVaeFolder(const std::string& model);

// Encodes with the Wan VAE: exactly one of --inputs ('pixels' [B, 3, F, H, W] or [B, 3, H, W] in [-1, 1]) and
// --video (a video file or a folder of frames, read and bucketed by core/video). Writes `latents` (posterior
// mean [B, z_dim, F', H/f, W/f]; f = 8 for Wan 2.1, 16 for 2.2) and `normalized` ((latents − latents_mean) /
// latents_std), plus `pixels` for
// --video (the bucketed clip [1, 3, F, H, W] that was encoded).
absl::Status WanVaeEncode(const Args& args, const std::string& vae_dir);

// `baton write-video`: a folder of frame images (sorted names) → a video file (scripts/make_wan_sample.py uses it
// for data/wan_sample/).
absl::Status WriteVideo(const Args& args);

}  // namespace baton
