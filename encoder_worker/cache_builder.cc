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

std::vector<std::pair<int64_t, BucketSpec>> BuildResolutions(const CacheBuildOptions& options) {
  if (options.resolutions.size() < 2) return {{0, options.buckets}};
  std::vector<std::pair<int64_t, BucketSpec>> out;
  for (int64_t r : options.resolutions) out.emplace_back(r, BucketsForResolution(r));
  return out;
}

std::string RecordId(const std::string& name, int64_t resolution) {
  return resolution > 0 ? absl::StrCat(name, "@", resolution) : name;
}

namespace {

// The sample's reference images, each resized and cropped to its image's bucket as the image was, encoded as the
// image is: [n, grid_h·grid_w, C]; undefined when it has none.
absl::StatusOr<at::Tensor> EncodeReferences(SampleEncoder& encoder, const DatasetSample& sample, const Bucket& bucket) {
  std::vector<at::Tensor> latents;
  for (const std::string& path : sample.reference_paths) {
    ASSIGN_OR_RETURN(Image reference, ReadImageFile(path));
    ASSIGN_OR_RETURN(at::Tensor encoded, encoder.EncodeImage(ResizeToBucket(reference, bucket)));
    latents.push_back(encoded);
  }
  return latents.empty() ? at::Tensor() : at::stack(latents);
}

}  // namespace

absl::StatusOr<CacheBuildReport> BuildCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                            const std::function<void(const CacheBuildProgress&)>& on_progress) {
  if (encoder.encodes_video()) return BuildVideoCache(encoder, options, on_progress);
  const auto started = std::chrono::steady_clock::now();
  ScanOptions scan_options;
  scan_options.trigger = options.trigger;
  scan_options.follow_links_into = options.follow_links_into;
  scan_options.control_dir = options.control_dir;
  if (options.shard) {
    const ShardSpec shard = *options.shard;
    scan_options.include = [shard](const std::string& name) { return shard.Contains(name); };
  }
  ASSIGN_OR_RETURN(Dataset dataset, ScanDataset(options.dataset_dir, scan_options));
  // One item per sample and resolution, sample after sample.
  const std::vector<std::pair<int64_t, BucketSpec>> resolutions = BuildResolutions(options);
  std::vector<std::vector<Bucket>> buckets;
  for (const auto& [r, spec] : resolutions) {
    ASSIGN_OR_RETURN(std::vector<Bucket> list, MakeBuckets(spec));
    buckets.push_back(std::move(list));
  }
  std::vector<CacheBuildItem> items;
  struct Item {
    const DatasetSample* sample;
    int64_t resolution;
    Bucket bucket;
  };
  std::vector<Item> item_of;
  for (const DatasetSample& sample : dataset.samples) {
    for (size_t k = 0; k < resolutions.size(); ++k) {
      const int64_t r = resolutions[k].first;
      items.push_back({RecordId(sample.name, r), sample.image_path, sample.content_hash});
      item_of.push_back({&sample, r, buckets[k][AssignBucket(buckets[k], sample.width, sample.height)]});
    }
  }
  SortByRecordId(items, item_of);
  CacheBuildSteps steps;
  steps.record_fits = [&](size_t i, const CacheRecordInfo& existing) {
    return existing.bucket == item_of[i].bucket.ToString() && existing.resolution == item_of[i].resolution;
  };
  steps.encode = [&](size_t i, const std::string& identity) -> absl::StatusOr<std::vector<CacheRecordInfo>> {
    const DatasetSample& sample = *item_of[i].sample;
    const Bucket& bucket = item_of[i].bucket;
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
    ASSIGN_OR_RETURN(s.references, EncodeReferences(encoder, sample, bucket));
    ASSIGN_OR_RETURN(CacheRecordInfo info, WriteCacheRecord(options.cache_dir, items[i].name, sample.content_hash,
                                                            identity, s, bucket.ToString(), item_of[i].resolution,
                                                            items[i].name == sample.name ? "" : sample.name));
    return std::vector<CacheRecordInfo>{info};
  };
  return RunCacheBuild(encoder, options, items, dataset.errors, steps, started, on_progress);
}

}  // namespace baton
