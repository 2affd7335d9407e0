// The video half of the cache builder (Wan): scan a folder of clips with captions (video_dataset.h), bucket each
// clip (core/video: 4k+1 frames, sides multiples of 16, area <= the --resolution² target), encode the clip (VAE →
// normalised latents [C, F', H/8, W/8]) and its caption (umT5 → [L, d_model]) into one video record (cache.h,
// "frames" = F'). Reruns keep every record whose clip hash (bytes, caption, trigger, bucket settings) and encoder
// identity are unchanged and that reads back whole, exactly as BuildCache does for images.
#pragma once

#include <functional>

#include "encoder_worker/cache_builder.h"

namespace baton {

// BuildCache calls this when the encoder encodes video (SampleEncoder::encodes_video()). The bucket area is
// options.buckets.target_area; frames/stride come from options.video.
absl::StatusOr<CacheBuildReport> BuildVideoCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                                 const std::function<void(const CacheBuildProgress&)>& on_progress);

}  // namespace baton
