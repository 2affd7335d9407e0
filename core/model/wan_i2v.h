// Wan image-to-video conditioning as diffusers' WanImageToVideoPipeline builds it: the kinds a cache names, the
// first-frame mask of prepare_latents, and the transformer input a training step or the sampler feeds from noisy
// latents and a clip's cached conditioning (core/data/cache.h "condition").
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>

#include "core/model/wan_config.h"

namespace baton {

// Wan 2.1 I2V 14B and Wan 2.2 I2V A14B (in_channels = 2·z + 4): condition [4 + z, F', h, w] = cat(mask, the VAE
// latents of the first frame followed by zero frames); the transformer takes cat(noisy, condition).
inline constexpr char kWanFirstFrame[] = "wan_first_frame";
// Wan 2.1 FLF2V 14B: the same, with the clip's last frame kept in the encoded video and in the mask.
inline constexpr char kWanFirstLastFrame[] = "wan_first_last_frame";
// Wan 2.2 TI2V 5B in image-to-video mode (expand_timesteps): condition [z, 1, h, w] = the first frame's latents
// alone; latent frame 0 of the input is the clean condition, its tokens get timestep 0 and the loss leaves them out.
inline constexpr char kWanCleanFirstFrame[] = "wan_clean_first_frame";

bool IsWanConditioning(const std::string& kind);
// The condition's channels for a VAE of `z_dim` latent channels: 4 + z_dim, or z_dim for the clean first frame.
int64_t WanConditionChannels(const std::string& kind, int64_t z_dim);

// prepare_latents' mask_lat_size for one clip: [4, latent_frames, h, w], 1 where a pixel frame is given. Pixel frame
// 0 is repeated `temporal_factor` (4) times so 4·F' frames fold into 4 channels per latent frame; channel k of latent
// frame j ≥ 1 is pixel frame 4j + k − 3. keep_last: the last pixel frame is given too (FLF2V).
at::Tensor WanConditionMask(int64_t latent_frames, int64_t h, int64_t w, bool keep_last, int64_t temporal_factor = 4);

// OK when a cache of this conditioning (kind, channels, image_dim) fits `config`, else InvalidArgument saying what
// differs: a 36-channel model needs a first-frame kind with 4 + z channels, CLIP image embeddings exactly when the
// model has the image branch; a TI2V model takes the clean first frame or no conditioning.
absl::Status CheckWanConditioningFits(const WanConfig& config, int64_t latent_channels, const std::string& kind,
                                      int64_t condition_channels, int64_t image_dim);

// The transformer's hidden_states from noisy latents [b, z, F', h, w] and the batch's condition [b, cc, F' or 1, h,
// w]: cat(noisy, condition) for the first-frame kinds; noisy with latent frame 0 replaced by the condition for the
// clean first frame (the pipeline's (1 − mask)·condition + mask·latents).
absl::StatusOr<at::Tensor> WanConditionedInput(const std::string& kind, const at::Tensor& noisy,
                                               const at::Tensor& condition);

// Clean first frame: per-token timesteps [b, F'·(h/ph)·(w/pw)] = t on every token but latent frame 0's, which get 0
// (the pipeline's (mask[0][0][:, ::2, ::2] · t).flatten()). `timestep` [b].
at::Tensor WanExpandedTimesteps(const WanConfig& config, const at::Tensor& timestep, int64_t frames, int64_t h,
                                int64_t w);

// Clean first frame: the loss mask [b, 1, F', 1, 1] (0 on latent frame 0, 1 elsewhere) that leaves the given frame
// out of the loss, as DiffSynth-Studio's FlowMatchSFTLoss does (it drops frame 0 from prediction and target).
at::Tensor WanFirstFrameLossMask(int64_t batch, int64_t frames);

}  // namespace baton
