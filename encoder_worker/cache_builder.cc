#include "encoder_worker/cache_builder.h"

#include <absl/strings/str_cat.h>

#include <chrono>

#include "core/data/cache.h"
#include "core/metrics/families.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "encoder_worker/cache_build_loop.h"
#include "encoder_worker/loss_mask.h"
#include "encoder_worker/video_cache_builder.h"

namespace baton {

void StartEncoderMetrics() {
  EncoderMetrics& metrics = EncoderFamilies();
  metrics.samples_encoded.Add({});
  metrics.samples_kept.Add({});
  metrics.samples_failed.Add({});
  metrics.sample_seconds.Add({}, EncoderSampleBuckets());
}

absl::StatusOr<CacheBuildReport> BuildCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                            const std::function<void(const CacheBuildProgress&)>& on_progress) {
  if (encoder.encodes_video()) return BuildVideoCache(encoder, options, on_progress);
  const auto started = std::chrono::steady_clock::now();
  ScanOptions scan_options;
  scan_options.trigger = options.trigger;
  scan_options.follow_links_into = options.follow_links_into;
  if (options.shard) {
    const ShardSpec shard = *options.shard;
    scan_options.include = [shard](const std::string& name) { return shard.Contains(name); };
  }
  ASSIGN_OR_RETURN(Dataset dataset, ScanDataset(options.dataset_dir, scan_options));
  ASSIGN_OR_RETURN(std::vector<Bucket> buckets, MakeBuckets(options.buckets));
  std::vector<CacheBuildItem> items;
  std::vector<const Bucket*> sample_buckets;
  for (const DatasetSample& sample : dataset.samples) {
    items.push_back({sample.name, sample.image_path, sample.content_hash});
    sample_buckets.push_back(&buckets[AssignBucket(buckets, sample.width, sample.height)]);
  }
  CacheBuildSteps steps;
  steps.record_fits = [&](size_t i, const CacheRecordInfo& existing) {
    return existing.bucket == sample_buckets[i]->ToString();
  };
  steps.encode = [&](size_t i, const std::string& identity) -> absl::StatusOr<CacheRecordInfo> {
    const DatasetSample& sample = dataset.samples[i];
    const Bucket& bucket = *sample_buckets[i];
    ASSIGN_OR_RETURN(Image image, LoadSampleImage(sample));
    Image sized = ResizeToBucket(image, bucket);
    ASSIGN_OR_RETURN(at::Tensor latents, encoder.EncodeImage(sized));
    ASSIGN_OR_RETURN(at::Tensor text, encoder.EncodeText(sample.caption));
    CacheSample s{latents, text, bucket.height / 16, bucket.width / 16};
    if (latents.dim() != 2 || latents.size(0) != s.grid_h * s.grid_w) {
      return absl::InternalError(
          absl::StrCat("encoder returned latents ", ShapeString(latents.sizes()), " for bucket ", bucket.ToString()));
    }
    if (!sample.mask_path.empty()) {  // resized and cropped as the image was, then onto the latent grid
      ASSIGN_OR_RETURN(std::string bytes, ReadFile(sample.mask_path));
      ASSIGN_OR_RETURN(Image mask, DecodeImage(bytes, sample.mask_path));
      RETURN_IF_ERROR(CheckMaskImage(mask, image.width, image.height, sample.mask_path));
      s.loss_mask = MaskOnLatentGrid(ResizeToBucket(mask, bucket), s.grid_h, s.grid_w);
    }
    return WriteCacheRecord(options.cache_dir, sample.name, sample.content_hash, identity, s, bucket.ToString());
  };
  return RunCacheBuild(encoder, options, items, dataset.errors, steps, started, on_progress);
}

}  // namespace baton
