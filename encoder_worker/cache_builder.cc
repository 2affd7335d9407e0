#include "encoder_worker/cache_builder.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "core/data/cache.h"
#include "core/metrics/families.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "encoder_worker/video_cache_builder.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

std::string RecordFile(const std::string& id) { return absl::StrCat("records/", id, ".safetensors"); }

}  // namespace

absl::StatusOr<CacheSample> CheckRecordChecksum(const std::map<std::string, std::string>& checksums,
                                                const std::string& file, const CacheRecordInfo& read,
                                                absl::StatusOr<CacheSample> sample) {
  auto it = checksums.find(file);
  if (!sample.ok() || it == checksums.end() || it->second.empty() || it->second == read.checksum) return sample;
  return absl::DataLossError(absl::StrCat("cache record ", file, ": checksum of the tensor bytes is ", read.checksum,
                                          ", the index says ", it->second));
}

namespace {}  // namespace

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
  const auto t0 = Clock::now();
  ScanOptions scan_options;
  scan_options.trigger = options.trigger;
  ASSIGN_OR_RETURN(Dataset dataset, ScanDataset(options.dataset_dir, scan_options));
  ASSIGN_OR_RETURN(std::vector<Bucket> buckets, MakeBuckets(options.buckets));
  RETURN_IF_ERROR(MakeDirs(JoinPath(options.cache_dir, "records")));

  CacheBuildReport report;
  report.samples = static_cast<int64_t>(dataset.samples.size());
  report.errors = dataset.errors;
  EncoderMetrics& metrics = EncoderFamilies();
  prometheus::Counter& encoded_total = metrics.samples_encoded.Add({});
  prometheus::Counter& kept_total = metrics.samples_kept.Add({});
  prometheus::Counter& failed_total = metrics.samples_failed.Add({});
  prometheus::Histogram& sample_seconds = metrics.sample_seconds.Add({}, EncoderSampleBuckets());
  failed_total.Increment(static_cast<double>(dataset.errors.size()));  // unreadable files found by the scan
  // The records this cache's own index lists: the only files a rebuild may delete (a caller-chosen cache folder
  // may hold anything else, and keeps it).
  std::set<std::string> owned;
  std::map<std::string, std::string> checksums;  // file -> the checksum the previous index recorded for it
  if (auto previous = ReadCacheIndex(options.cache_dir); previous.ok()) {
    for (const CacheRecordInfo& r : previous->records) {
      owned.insert(r.file);
      checksums[r.file] = r.checksum;
    }
  }
  CacheIndex index;
  index.encoder = encoder.identity();
  index.latent_channels = encoder.latent_channels();
  index.text_dim = encoder.text_dim();
  CacheBuildProgress progress;
  progress.total = report.samples;
  double encode_seconds = 0;
  std::set<std::string> live_files;

  for (const DatasetSample& sample : dataset.samples) {
    progress.current = sample.name;
    const Bucket& bucket = buckets[AssignBucket(buckets, sample.width, sample.height)];
    const std::string id = sample.name;
    const std::string file = RecordFile(id);
    live_files.insert(file);
    // Keep an existing record only if it is for this exact input, bucket and encoder, and reads back whole.
    if (PathExists(JoinPath(options.cache_dir, file))) {
      CacheRecordInfo info;
      std::string record_encoder;
      auto existing =
          ReadCacheRecord(options.cache_dir, file, index.latent_channels, index.text_dim, &info, &record_encoder);
      // A record whose bytes no longer match the checksum its index recorded is corrupt (a bit flip keeps the size
      // and the header): rebuilt. One the previous index lists without a checksum (an older cache) gets one now.
      if (existing.ok()) existing = CheckRecordChecksum(checksums, file, info, existing);
      if (existing.ok() && info.hash == sample.content_hash && info.bucket == bucket.ToString() &&
          record_encoder == index.encoder) {
        index.records.push_back(info);
        ++report.kept;
        kept_total.Increment();
        ++progress.kept;
        ++progress.done;
        progress.elapsed_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        if (on_progress) on_progress(progress);
        continue;
      }
      if (!existing.ok()) {
        LogWarning("re-encoding ", sample.name, ": ", existing.status().message());
        ++report.reencoded_corrupt;
      }
    }
    auto t1 = Clock::now();
    auto encode = [&]() -> absl::StatusOr<CacheRecordInfo> {
      ASSIGN_OR_RETURN(Image image, LoadSampleImage(sample));
      Image sized = ResizeToBucket(image, bucket);
      ASSIGN_OR_RETURN(at::Tensor latents, encoder.EncodeImage(sized));
      ASSIGN_OR_RETURN(at::Tensor text, encoder.EncodeText(sample.caption));
      CacheSample s{latents, text, bucket.height / 16, bucket.width / 16};
      if (latents.dim() != 2 || latents.size(0) != s.grid_h * s.grid_w) {
        return absl::InternalError(absl::StrCat("encoder returned latents [", absl::StrJoin(latents.sizes(), ", "),
                                                "] for bucket ", bucket.ToString()));
      }
      return WriteCacheRecord(options.cache_dir, id, sample.content_hash, index.encoder, s, bucket.ToString());
    };
    auto info = encode();
    const double seconds = std::chrono::duration<double>(Clock::now() - t1).count();
    encode_seconds += seconds;
    if (info.ok()) {
      index.records.push_back(*info);
      ++report.encoded;
      encoded_total.Increment();
      sample_seconds.Observe(seconds);
      ++progress.encoded;
    } else {
      report.errors.push_back({sample.image_path, info.status()});
      failed_total.Increment();
      ++progress.failed;
      // A stale record for this sample must not survive into the index or stay on disk (if it is ours).
      if (owned.count(file)) (void)RemoveAll(JoinPath(options.cache_dir, file));
    }
    ++progress.done;
    progress.elapsed_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (on_progress) on_progress(progress);
  }
  // Records of samples that are gone from the dataset are dropped -- only those the previous index listed.
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
