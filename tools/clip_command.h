// `baton clip-encode-image`: Wan 2.1 I2V's image conditioning, as WanImageToVideoPipeline.encode_image computes it
// (CLIPImageProcessor, then CLIPVisionModel's hidden_states[-2]), for the CLIP referee
// (tests/upstream/test_clip_vision.py).
#pragma once

#include "client/commands.h"

namespace baton {

Command ClipEncodeImageCommand();

}  // namespace baton
