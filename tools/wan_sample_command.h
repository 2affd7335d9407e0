// `baton sample` on a Wan pipeline folder: one video from a prompt (and, for image-to-video models, a first frame)
// with the folder's scheduler and classifier-free guidance (core/sample/wan_sampler.h), decoded by its VAE and
// written as an MP4, in this process or through N local stage workers (--stages N).
#pragma once

#include <absl/status/status.h>

#include "client/args.h"

namespace baton {

// Sample's Wan branch (the family comes from --model): the same flags, plus --frames, --negative-prompt, --image,
// --scheduler; --out is the video file (16 fps).
absl::Status SampleWanVideo(const Args& args);

}  // namespace baton
