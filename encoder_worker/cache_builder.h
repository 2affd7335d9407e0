// Builds the training cache from a dataset folder: scan, assign aspect-ratio buckets, and for each sample
// encode the bucket-sized image (VAE → packed latents) and its caption (text encoder → prompt embeddings)
// into one record. Reruns keep every record whose source hash, bucket and encoder identity are unchanged
// and that reads back whole with the checksum its index recorded; a corrupt or partial record is re-encoded, never
// used. Per-file problems
// are reported and the rest of the dataset still encodes.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/data/cache.h"
#include "core/data/cache_shard.h"
#include "core/encode/sample_encoder.h"
#include "core/image/image.h"
#include "core/video/clip_windows.h"
#include "core/video/video_bucket.h"
#include "encoder_worker/bucket.h"
#include "encoder_worker/dataset.h"

namespace baton {

struct CacheBuildOptions {
  std::string dataset_dir;
  std::string cache_dir;
  std::string trigger;
  BucketSpec buckets;
  // Several resolutions (encoder_worker --resolution 512,768,1024): every sample is cached once at each, with
  // BucketsForResolution's buckets, as record "<name>@<resolution>" (CacheRecordInfo::resolution); fewer than two:
  // `buckets` alone, records named as the samples.
  std::vector<int64_t> resolutions;
  // Video encoders (Wan): frames and stride of the clip buckets; the area comes from buckets.target_area.
  VideoBucketSpec video;
  // Video encoders: how a clip longer than its frame bucket becomes clips (head: the first only).
  ClipExtraction extraction;
  // Set: encode only this worker's share of the dataset, into a cache folder of its own that no other share and no
  // whole-dataset build uses (core/data/cache_shard.h; cache_merge.h joins the shares). Unset: the whole dataset.
  std::optional<ShardSpec> shard;
  // Folders outside the dataset that its symlinks may lead into (ScanOptions::follow_links_into); the operator's
  // --follow_links_into, never a request's.
  std::vector<std::string> follow_links_into;
  // FLUX.2 reference images: the control folder (ScanOptions::control_dir; references.h); "" = none. Image caches
  // only: a video encoder refuses it.
  std::string control_dir;
};

struct CacheBuildProgress {
  int64_t done = 0, total = 0;
  int64_t encoded = 0, kept = 0, failed = 0;
  double elapsed_seconds = 0;
  std::string current;  // sample name
};

struct CacheBuildReport {
  int64_t samples = 0;     // images found with captions
  int64_t unreadable = 0;  // samples the scan could not use (a missing caption, a file outside): in errors, not above
  int64_t encoded = 0;     // newly encoded (including re-encoded corrupt ones)
  int64_t kept = 0;        // unchanged records skipped
  int64_t reencoded_corrupt = 0;
  std::vector<FileError> errors;  // scan and encode errors, per file
  double seconds = 0;
  double seconds_per_encoded_sample = 0;
};

// Creates the encoder's metric series (baton_encoder_*) at zero, so a scrape shows them before the first sample.
// BuildCache counts every sample it encodes, keeps or fails in them.
void StartEncoderMetrics();

// The bucket settings a build encodes at: {resolution, spec} for each of options.resolutions, or {0, options.buckets}.
std::vector<std::pair<int64_t, BucketSpec>> BuildResolutions(const CacheBuildOptions& options);
// The record id of sample `name` at `resolution` (0: the name itself).
std::string RecordId(const std::string& name, int64_t resolution);

// A video encoder (encoder.encodes_video()) builds from clips instead: BuildVideoCache (video_cache_builder.h).
absl::StatusOr<CacheBuildReport> BuildCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                            const std::function<void(const CacheBuildProgress&)>& on_progress = {});

}  // namespace baton
