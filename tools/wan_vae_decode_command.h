// `baton vae-decode`: a Wan VAE (vae/config.json `_class_name` AutoencoderKLWan) turns the transformer's normalised
// latents into pixels, as WanPipeline.__call__ does after denoising (un-normalise, AutoencoderKLWan.decode).
#pragma once

#include "client/commands.h"

namespace baton {

Command WanVaeDecodeCommand();

}  // namespace baton
