#include "encoder_worker/video_cache_builder.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/data/cache.h"
#include "core/image/image.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"
#include "encoder_worker/cache_build_loop.h"
#include "encoder_worker/loss_mask.h"
#include "encoder_worker/video_dataset.h"

namespace baton {
namespace {

// `image_path` scaled to cover the clip's frames ([1, 3, F, H, W] pixels) and center-cropped to them, as
// BucketClipToPixels treats each frame.
absl::StatusOr<Image> CoveringTheFrames(const std::string& image_path, const at::Tensor& pixels) {
  ASSIGN_OR_RETURN(Image image, ReadImageFile(image_path));
  const int h = static_cast<int>(pixels.size(3)), w = static_cast<int>(pixels.size(4));
  const double scale = std::max(static_cast<double>(w) / image.width, static_cast<double>(h) / image.height);
  Image covered = ResizeImage(image, std::max(w, static_cast<int>(std::ceil(image.width * scale))),
                              std::max(h, static_cast<int>(std::ceil(image.height * scale))));
  return CenterCrop(covered, w, h);
}

// The clip's pixels with frame 0 replaced by `image_path` (CoveringTheFrames): the first frame an image-to-video
// record is conditioned on.
absl::StatusOr<at::Tensor> WithFirstFrameFrom(const std::string& image_path, const at::Tensor& pixels) {
  ASSIGN_OR_RETURN(Image image, CoveringTheFrames(image_path, pixels));
  at::Tensor out = pixels.clone();
  out.select(2, 0).copy_(ImageToPixels(image));
  return out;
}

// Decodes, buckets and encodes one clip into its record. The bucket string is the pixel "WxHxF" the clip became.
absl::StatusOr<CacheRecordInfo> EncodeClip(SampleEncoder& encoder, const DatasetFence& fence, const VideoSample& sample,
                                           const VideoBucketSpec& spec, const CacheBuildOptions& options,
                                           const std::string& identity) {
  // The decoders open the clip and the image by name: judged again now, not only when the scan read them.
  RETURN_IF_ERROR(CheckVideoSampleInside(fence, sample));
  ASSIGN_OR_RETURN(at::Tensor pixels, LoadClipPixels(sample.path, spec));  // [1, 3, F, H, W]
  ASSIGN_OR_RETURN(at::Tensor latents, encoder.EncodeVideo(pixels));
  ASSIGN_OR_RETURN(at::Tensor text, encoder.EncodeText(sample.caption));
  if (latents.dim() != 4 || latents.size(0) != encoder.latent_channels()) {
    return absl::InternalError(absl::StrCat("encoder returned latents ", ShapeString(latents.sizes()), " for ",
                                            sample.path, ", not [", encoder.latent_channels(), ", F, H, W]"));
  }
  CacheSample s{latents, text, latents.size(2), latents.size(3), latents.size(1)};
  if (!encoder.conditioning().empty()) {
    at::Tensor first = pixels;
    if (!sample.image_path.empty()) {
      ASSIGN_OR_RETURN(first, WithFirstFrameFrom(sample.image_path, pixels));
    }
    ASSIGN_OR_RETURN(ClipConditioning conditioning, encoder.EncodeConditioning(first));
    s.condition = conditioning.condition;
    s.image_embeds = conditioning.image_embeds;
  }
  if (!sample.mask_path.empty()) {
    ASSIGN_OR_RETURN(Image mask, CoveringTheFrames(sample.mask_path, pixels));
    RETURN_IF_ERROR(CheckMaskImage(mask, mask.width, mask.height, sample.mask_path));  // still white somewhere
    s.loss_mask = MaskOnLatentGrid(mask, s.grid_h, s.grid_w);
  }
  const std::string bucket = absl::StrCat(pixels.size(4), "x", pixels.size(3), "x", pixels.size(2));
  return WriteCacheRecord(options.cache_dir, sample.name, sample.content_hash, identity, s, bucket);
}

}  // namespace

absl::StatusOr<CacheBuildReport> BuildVideoCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                                 const std::function<void(const CacheBuildProgress&)>& on_progress) {
  const auto started = std::chrono::steady_clock::now();
  VideoBucketSpec spec = options.video;
  spec.target_area = options.buckets.target_area;
  ScanOptions scan_options;
  scan_options.trigger = options.trigger;
  scan_options.follow_links_into = options.follow_links_into;
  if (options.shard) {
    const ShardSpec shard = *options.shard;
    scan_options.include = [shard](const std::string& name) { return shard.Contains(name); };
  }
  ASSIGN_OR_RETURN(VideoDataset dataset, ScanVideoDataset(options.dataset_dir, spec, scan_options));
  ASSIGN_OR_RETURN(const DatasetFence fence, DatasetFence::Make(options.dataset_dir, options.follow_links_into));
  std::vector<CacheBuildItem> items;
  for (const VideoSample& sample : dataset.samples) items.push_back({sample.name, sample.path, sample.content_hash});
  CacheBuildSteps steps;
  steps.record_fits = [](size_t, const CacheRecordInfo& existing) { return existing.frames > 0; };
  steps.encode = [&](size_t i, const std::string& identity) {
    return EncodeClip(encoder, fence, dataset.samples[i], spec, options, identity);
  };
  return RunCacheBuild(encoder, options, items, dataset.errors, steps, started, on_progress);
}

}  // namespace baton
