#include "encoder_worker/video_cache_builder.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <chrono>

#include "core/data/cache.h"
#include "core/image/image.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"
#include "core/video/video_io.h"
#include "encoder_worker/cache_build_loop.h"
#include "encoder_worker/loss_mask.h"
#include "encoder_worker/video_dataset.h"

namespace baton {
namespace {

// `image_path` scaled to cover the clip's frames ([1, 3, F, H, W] pixels) and center-cropped to them, as
// BucketClipToPixels treats each frame.
absl::StatusOr<Image> CoveringTheFrames(const std::string& image_path, const at::Tensor& pixels) {
  ASSIGN_OR_RETURN(Image image, ReadImageFile(image_path));
  return CoverAndCrop(image, static_cast<int>(pixels.size(4)), static_cast<int>(pixels.size(3)));
}

// The clip's pixels with frame 0 replaced by `image_path` (CoveringTheFrames): the first frame an image-to-video
// record is conditioned on.
absl::StatusOr<at::Tensor> WithFirstFrameFrom(const std::string& image_path, const at::Tensor& pixels) {
  ASSIGN_OR_RETURN(Image image, CoveringTheFrames(image_path, pixels));
  at::Tensor out = pixels.clone();
  out.select(2, 0).copy_(ImageToPixels(image));
  return out;
}

// A clip's mask must be the size of its frames (docs/jobs.md, "Masked loss"): checked against the first frame.
absl::Status CheckClipMaskSize(const VideoSample& sample) {
  ASSIGN_OR_RETURN(Image mask, ReadImageFile(sample.mask_path));
  ASSIGN_OR_RETURN(Clip first, ReadClip(sample.path, 1));
  return CheckMaskImage(mask, first.frames.at(0).width, first.frames.at(0).height, sample.mask_path);
}

// Whether `sample` is cut into several clips (records "<name>#<window>"): a video, with an extraction mode but head.
bool Windowed(const VideoSample& sample, const CacheBuildOptions& options) {
  return !sample.still && options.extraction.mode != "head";
}

// Where a clip's record goes: its id, and the resolution, sample name and window it records.
struct ClipRecordKey {
  std::string id;
  int64_t resolution = 0;
  std::string sample;  // "" when the id is the sample's name
  int64_t window = -1;
};

// Encodes one bucketed clip (pixels [1, 3, F, H, W]) of `sample` into its record. The bucket string is the pixel
// "WxHxF" the clip became.
absl::StatusOr<CacheRecordInfo> EncodeClip(SampleEncoder& encoder, const VideoSample& sample, const at::Tensor& pixels,
                                           const CacheBuildOptions& options, const ClipRecordKey& key,
                                           const std::string& identity) {
  ASSIGN_OR_RETURN(at::Tensor latents, encoder.EncodeVideo(pixels));
  ASSIGN_OR_RETURN(at::Tensor text, encoder.EncodeText(sample.caption));
  if (latents.dim() != 4 || latents.size(0) != encoder.latent_channels()) {
    return absl::InternalError(absl::StrCat("encoder returned latents ", ShapeString(latents.sizes()), " for ",
                                            sample.path, ", not [", encoder.latent_channels(), ", F, H, W]"));
  }
  CacheSample s{latents, text, latents.size(2), latents.size(3), latents.size(1)};
  if (!encoder.conditioning().empty()) {
    at::Tensor first = pixels;
    if (!sample.image_path.empty() && key.window <= 0) {  // the image stands for the video's first frame only
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
  return WriteCacheRecord(options.cache_dir, key.id, sample.content_hash, identity, s, bucket, key.resolution,
                          key.sample, key.window);
}

// Decodes, buckets and cuts one clip (or still) of the dataset and encodes each of its clips into a record: one named
// `item.name`, or with an extraction mode other than head, "<item.name>#<window>" for each.
absl::StatusOr<std::vector<CacheRecordInfo>> EncodeVideoSample(SampleEncoder& encoder, const DatasetFence& fence,
                                                               const VideoSample& sample, const VideoBucketSpec& spec,
                                                               const CacheBuildOptions& options,
                                                               const CacheBuildItem& item, int64_t resolution,
                                                               const std::string& identity) {
  // The decoders open the clip and the image by name: judged again now, not only when the scan read them.
  RETURN_IF_ERROR(CheckVideoSampleInside(fence, sample));
  std::vector<at::Tensor> clips;
  if (sample.still) {
    if (!encoder.conditioning().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(sample.path,
                                                     ": a still image trains text-to-video only; this "
                                                     "cache conditions every record on its clip's first frame"));
    }
    ASSIGN_OR_RETURN(Image image, ReadImageFile(sample.path));
    ASSIGN_OR_RETURN(at::Tensor pixels, StillToPixels(image, spec));
    clips.push_back(pixels);
  } else {
    if (!sample.mask_path.empty()) RETURN_IF_ERROR(CheckClipMaskSize(sample));
    ASSIGN_OR_RETURN(clips, LoadClipWindows(sample.path, spec, options.extraction));
  }
  const bool windows = Windowed(sample, options);
  std::vector<CacheRecordInfo> records;
  for (size_t k = 0; k < clips.size(); ++k) {
    ClipRecordKey key{item.name, resolution, item.name == sample.name ? "" : sample.name, -1};
    if (windows) {
      key = {absl::StrCat(item.name, "#", k), resolution, sample.name, static_cast<int64_t>(k)};
    }
    ASSIGN_OR_RETURN(CacheRecordInfo info, EncodeClip(encoder, sample, clips[k], options, key, identity));
    records.push_back(std::move(info));
  }
  return records;
}

}  // namespace

absl::StatusOr<CacheBuildReport> BuildVideoCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                                 const std::function<void(const CacheBuildProgress&)>& on_progress) {
  const auto started = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(CheckClipExtraction(options.extraction));
  if (!options.control_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--control ", options.control_dir,
        ": reference images are FLUX.2's (editing); a Wan image-to-video model conditions on a clip's first frame"));
  }
  ScanOptions scan_options;
  scan_options.trigger = options.trigger;
  scan_options.follow_links_into = options.follow_links_into;
  if (options.shard) {
    const ShardSpec shard = *options.shard;
    scan_options.include = [shard](const std::string& name) { return shard.Contains(name); };
  }
  ASSIGN_OR_RETURN(const DatasetFence fence, DatasetFence::Make(options.dataset_dir, options.follow_links_into));
  // One scan per resolution (a clip's content hash covers its bucket settings), one item per clip and resolution.
  struct Item {
    VideoBucketSpec spec;
    int64_t resolution;
    VideoSample sample;
  };
  std::vector<Item> item_of;
  std::vector<CacheBuildItem> items;
  std::vector<FileError> errors;
  bool first_scan = true;
  for (const auto& [resolution, buckets] : BuildResolutions(options)) {
    VideoBucketSpec spec = options.video;
    spec.target_area = buckets.target_area;
    ASSIGN_OR_RETURN(VideoDataset dataset,
                     ScanVideoDataset(options.dataset_dir, spec, scan_options, options.extraction));
    // A file's scan error is the same at every resolution: reported (and counted) once.
    if (first_scan) errors.insert(errors.end(), dataset.errors.begin(), dataset.errors.end());
    first_scan = false;
    for (const VideoSample& sample : dataset.samples) {
      items.push_back({RecordId(sample.name, resolution), sample.path, sample.content_hash});
      item_of.push_back({spec, resolution, sample});
    }
  }
  SortByRecordId(items, item_of);
  CacheBuildSteps steps;
  steps.record_fits = [&](size_t i, const CacheRecordInfo& existing) {
    return existing.frames > 0 && existing.resolution == item_of[i].resolution &&
           (existing.window >= 0) == Windowed(item_of[i].sample, options);
  };
  steps.encode = [&](size_t i, const std::string& identity) {
    const Item& item = item_of[i];
    return EncodeVideoSample(encoder, fence, item.sample, item.spec, options, items[i], item.resolution, identity);
  };
  return RunCacheBuild(encoder, options, items, std::move(errors), steps, started, on_progress);
}

}  // namespace baton
