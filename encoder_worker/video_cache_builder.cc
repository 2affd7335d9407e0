#include "encoder_worker/video_cache_builder.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "core/data/cache.h"
#include "core/metrics/families.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "encoder_worker/video_dataset.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

// Decodes, buckets and encodes one clip into its record. The bucket string is the pixel "WxHxF" the clip became.
absl::StatusOr<CacheRecordInfo> EncodeClip(SampleEncoder& encoder, const VideoSample& sample,
                                           const VideoBucketSpec& spec, const CacheBuildOptions& options,
                                           const std::string& identity) {
  ASSIGN_OR_RETURN(at::Tensor pixels, LoadClipPixels(sample.path, spec));  // [1, 3, F, H, W]
  ASSIGN_OR_RETURN(at::Tensor latents, encoder.EncodeVideo(pixels));
  ASSIGN_OR_RETURN(at::Tensor text, encoder.EncodeText(sample.caption));
  if (latents.dim() != 4 || latents.size(0) != encoder.latent_channels()) {
    return absl::InternalError(absl::StrCat("encoder returned latents [", absl::StrJoin(latents.sizes(), ", "),
                                            "] for ", sample.path, ", not [", encoder.latent_channels(), ", F, H, W]"));
  }
  CacheSample s{latents, text, latents.size(2), latents.size(3), latents.size(1)};
  const std::string bucket = absl::StrCat(pixels.size(4), "x", pixels.size(3), "x", pixels.size(2));
  return WriteCacheRecord(options.cache_dir, sample.name, sample.content_hash, identity, s, bucket);
}

// The existing record for `sample` if it may be kept (same hash and encoder, reads back whole); counts a corrupt one.
std::optional<CacheRecordInfo> KeepableRecord(const CacheBuildOptions& options, const CacheIndex& index,
                                              const std::map<std::string, std::string>& checksums,
                                              const VideoSample& sample, const std::string& file,
                                              CacheBuildReport& report) {
  if (!PathExists(JoinPath(options.cache_dir, file))) return std::nullopt;
  CacheRecordInfo info;
  std::string record_encoder;
  auto existing =
      ReadCacheRecord(options.cache_dir, file, index.latent_channels, index.text_dim, &info, &record_encoder);
  if (existing.ok()) existing = CheckRecordChecksum(checksums, file, info, existing);
  if (existing.ok() && info.frames > 0 && info.hash == sample.content_hash && record_encoder == index.encoder) {
    return info;
  }
  if (!existing.ok()) {
    LogWarning("re-encoding ", sample.name, ": ", existing.status().message());
    ++report.reencoded_corrupt;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<CacheBuildReport> BuildVideoCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                                 const std::function<void(const CacheBuildProgress&)>& on_progress) {
  const auto t0 = Clock::now();
  VideoBucketSpec spec = options.video;
  spec.target_area = options.buckets.target_area;
  ASSIGN_OR_RETURN(VideoDataset dataset, ScanVideoDataset(options.dataset_dir, options.trigger, spec));
  RETURN_IF_ERROR(MakeDirs(JoinPath(options.cache_dir, "records")));
  CacheBuildReport report;
  report.samples = static_cast<int64_t>(dataset.samples.size());
  report.errors = dataset.errors;
  EncoderMetrics& metrics = EncoderFamilies();
  metrics.samples_failed.Add({}).Increment(static_cast<double>(dataset.errors.size()));
  std::set<std::string> owned;                   // the only files a rebuild may delete: those the previous index listed
  std::map<std::string, std::string> checksums;  // file -> its checksum in the previous index
  if (auto previous = ReadCacheIndex(options.cache_dir); previous.ok()) {
    for (const CacheRecordInfo& r : previous->records) {
      owned.insert(r.file);
      checksums[r.file] = r.checksum;
    }
  }
  CacheIndex index{encoder.identity(), encoder.latent_channels(), encoder.text_dim(), {}};
  CacheBuildProgress progress;
  progress.total = report.samples;
  double encode_seconds = 0;
  std::set<std::string> live_files;
  for (const VideoSample& sample : dataset.samples) {
    progress.current = sample.name;
    const std::string file = absl::StrCat("records/", sample.name, ".safetensors");
    live_files.insert(file);
    if (auto kept = KeepableRecord(options, index, checksums, sample, file, report)) {
      index.records.push_back(*kept);
      ++report.kept;
      ++progress.kept;
      metrics.samples_kept.Add({}).Increment();
    } else {
      const auto t1 = Clock::now();
      auto info = EncodeClip(encoder, sample, spec, options, index.encoder);
      const double seconds = std::chrono::duration<double>(Clock::now() - t1).count();
      encode_seconds += seconds;
      if (info.ok()) {
        index.records.push_back(*info);
        ++report.encoded;
        ++progress.encoded;
        metrics.samples_encoded.Add({}).Increment();
        metrics.sample_seconds.Add({}, EncoderSampleBuckets()).Observe(seconds);
      } else {
        report.errors.push_back({sample.path, info.status()});
        ++progress.failed;
        metrics.samples_failed.Add({}).Increment();
        if (owned.count(file)) (void)RemoveAll(JoinPath(options.cache_dir, file));
      }
    }
    ++progress.done;
    progress.elapsed_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (on_progress) on_progress(progress);
  }
  std::error_code ec;
  for (const std::string& file : owned) {
    if (!live_files.count(file) && absl::StartsWith(file, "records/") && file.find("..") == std::string::npos) {
      std::filesystem::remove(JoinPath(options.cache_dir, file), ec);
    }
  }
  RETURN_IF_ERROR(WriteCacheIndex(options.cache_dir, index));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report.seconds_per_encoded_sample = report.encoded > 0 ? encode_seconds / static_cast<double>(report.encoded) : 0;
  return report;
}

}  // namespace baton
