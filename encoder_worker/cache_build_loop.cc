#include "encoder_worker/cache_build_loop.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/data/cache_shard.h"
#include "core/data/empty_prompt.h"
#include "core/metrics/families.h"
#include "core/util/clock.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

// FAILED_PRECONDITION when `cache_dir` holds another share, or the whole dataset's cache while this run encodes a share
// (or the reverse): its records would be dropped as gone from the dataset and its index overwritten. Marks a new
// shard folder (core/data/cache_shard.h) before its first record.
absl::Status ClaimCacheFolder(const std::string& cache_dir, const std::optional<ShardSpec>& wanted) {
  ASSIGN_OR_RETURN(std::optional<ShardSpec> held, ReadCacheShard(cache_dir));
  const bool whole_cache = !held && PathExists(JoinPath(cache_dir, "index.json"));
  auto describe = [](const std::optional<ShardSpec>& shard) {
    return shard ? absl::StrCat("shard ", shard->ToString()) : std::string("the whole dataset");
  };
  if ((held || whole_cache) && describe(held) != describe(wanted)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cache folder ", cache_dir, " holds ", describe(held), ", and this run encodes ", describe(wanted),
                     ": give each shard a --cache folder of its own and join them with encoder_worker --merge "
                     "(or remove the folder to start it anew)"));
  }
  if (wanted && !held) RETURN_IF_ERROR(WriteCacheShard(cache_dir, *wanted));
  return absl::OkStatus();
}

// The cache's empty-caption embedding (core/data/empty_prompt.h): the previous one when it reads back whole, made by
// this encoder; else "" encoded anew (once per build: as much as one caption).
absl::StatusOr<EmptyPromptInfo> EmptyPromptFor(SampleEncoder& encoder, const std::string& cache_dir,
                                               const CacheIndex& index, const EmptyPromptInfo& previous) {
  if (previous.present() && ReadEmptyPrompt(cache_dir, index.layout(), previous, index.encoder).ok()) return previous;
  auto empty = encoder.EncodeText("");
  if (!empty.ok()) return Annotate(empty.status(), "encoding the empty caption (caption dropout trains on it)");
  return WriteEmptyPrompt(cache_dir, index.encoder, *empty);
}

}  // namespace

absl::StatusOr<CacheSample> CheckRecordChecksum(const std::map<std::string, std::string>& checksums,
                                                const std::string& file, const CacheRecordInfo& read,
                                                absl::StatusOr<CacheSample> sample) {
  auto it = checksums.find(file);
  if (!sample.ok() || it == checksums.end() || it->second.empty() || it->second == read.checksum) return sample;
  return absl::DataLossError(absl::StrCat("cache record ", file, ": checksum of the tensor bytes is ", read.checksum,
                                          ", the index says ", it->second));
}

absl::StatusOr<CacheBuildReport> RunCacheBuild(SampleEncoder& encoder, const CacheBuildOptions& options,
                                               const std::vector<CacheBuildItem>& items,
                                               std::vector<FileError> scan_errors, const CacheBuildSteps& steps,
                                               Clock::time_point started,
                                               const std::function<void(const CacheBuildProgress&)>& on_progress) {
  RETURN_IF_ERROR(ClaimCacheFolder(options.cache_dir, options.shard));
  RETURN_IF_ERROR(MakeDirs(JoinPath(options.cache_dir, "records")));
  CacheBuildReport report;
  report.samples = static_cast<int64_t>(items.size());
  report.errors = std::move(scan_errors);
  report.unreadable = static_cast<int64_t>(report.errors.size());
  EncoderMetrics& metrics = EncoderFamilies();
  prometheus::Counter& encoded_total = metrics.samples_encoded.Add({});
  prometheus::Counter& kept_total = metrics.samples_kept.Add({});
  prometheus::Counter& failed_total = metrics.samples_failed.Add({});
  prometheus::Histogram& sample_seconds = metrics.sample_seconds.Add({}, EncoderSampleBuckets());
  failed_total.Increment(static_cast<double>(report.errors.size()));  // unreadable files found by the scan
  // The records this cache's own index lists: the only files a rebuild may delete (a caller-chosen cache folder
  // may hold anything else, and keeps it).
  CacheIndex index =
      CacheIndex::For(encoder.identity(), {encoder.latent_channels(), encoder.text_dim(), encoder.conditioning(),
                                           encoder.condition_channels(), encoder.image_dim()});
  std::set<std::string> owned;
  std::map<std::string, std::string> checksums;  // file -> the checksum the previous index recorded for it
  std::map<std::string, std::vector<std::string>> group_files;  // group -> its record files, in index order
  EmptyPromptInfo previous_empty;
  // A previous index of another encoder or layout (another model, precision or conditioning): none of its records
  // can be kept, so none is read (they are re-encoded, not reported corrupt).
  bool previous_other_encoder = false;
  if (auto previous = ReadCacheIndex(options.cache_dir); previous.ok()) {
    previous_other_encoder = previous->encoder != index.encoder || previous->layout() != index.layout();
    previous_empty = previous->empty_prompt;
    for (const CacheRecordInfo& r : previous->records) {
      owned.insert(r.file);
      checksums[r.file] = r.checksum;
      group_files[r.Group()].push_back(r.file);
    }
  }
  CacheBuildProgress progress;
  progress.total = report.samples;
  double encode_seconds = 0;
  std::set<std::string> live_files;

  // The existing record `file` of item i if it may be kept: it reads back whole with the checksum its index recorded,
  // and is for this exact input, encoder and the builder's settings. A corrupt one is counted and logged.
  auto keepable = [&](size_t i, const std::string& file) -> std::optional<CacheRecordInfo> {
    if (previous_other_encoder || !PathExists(JoinPath(options.cache_dir, file))) return std::nullopt;
    CacheRecordInfo info;
    std::string record_encoder;
    auto existing = ReadCacheRecord(options.cache_dir, file, index.layout(), &info, &record_encoder);
    // A record whose bytes no longer match the checksum its index recorded is corrupt (a bit flip keeps the size
    // and the header): rebuilt. One the previous index lists without a checksum (an older cache) gets one now.
    if (existing.ok()) existing = CheckRecordChecksum(checksums, file, info, existing);
    if (existing.ok() && info.hash == items[i].content_hash && record_encoder == index.encoder &&
        steps.record_fits(i, info)) {
      return info;
    }
    if (!existing.ok()) {
      LogWarning("re-encoding ", items[i].name, ": ", existing.status().message());
      ++report.reencoded_corrupt;
    }
    return std::nullopt;
  };
  // Every record of item i's group if all may be kept; else none.
  auto keep_group = [&](size_t i,
                        const std::vector<std::string>& files) -> std::optional<std::vector<CacheRecordInfo>> {
    std::vector<CacheRecordInfo> kept;
    for (const std::string& file : files) {
      auto one = keepable(i, file);
      if (!one) return std::nullopt;
      kept.push_back(*one);
    }
    return kept;
  };

  for (size_t i = 0; i < items.size(); ++i) {
    const CacheBuildItem& item = items[i];
    progress.current = item.name;
    auto group = group_files.find(item.name);
    const std::vector<std::string> files =
        group != group_files.end() ? group->second : std::vector<std::string>{CacheRecordFile(item.name)};
    if (auto kept = keep_group(i, files)) {
      for (const CacheRecordInfo& r : *kept) {
        index.records.push_back(r);
        live_files.insert(r.file);
      }
      ++report.kept;
      kept_total.Increment();
      ++progress.kept;
    } else {
      const auto t1 = Clock::now();
      auto infos = steps.encode(i, index.encoder);
      const double seconds = SecondsSince(t1);
      encode_seconds += seconds;
      if (infos.ok()) {
        for (const CacheRecordInfo& r : *infos) {
          index.records.push_back(r);
          live_files.insert(r.file);
        }
        ++report.encoded;
        encoded_total.Increment();
        sample_seconds.Observe(seconds);
        ++progress.encoded;
      } else {
        report.errors.push_back({item.source_path, infos.status()});
        failed_total.Increment();
        ++progress.failed;
      }
    }
    ++progress.done;
    progress.elapsed_seconds = SecondsSince(started);
    if (on_progress) on_progress(progress);
  }
  // Records of samples that are gone from the dataset, that failed, or that are no longer produced (a video cut into
  // fewer clips) are dropped -- only those the previous index listed.
  std::error_code ec;
  for (const std::string& file : owned) {
    if (!live_files.count(file) && absl::StartsWith(file, "records/") && file.find("..") == std::string::npos) {
      std::filesystem::remove(JoinPath(options.cache_dir, file), ec);
    }
  }
  ASSIGN_OR_RETURN(index.empty_prompt, EmptyPromptFor(encoder, options.cache_dir, index,
                                                      previous_other_encoder ? EmptyPromptInfo{} : previous_empty));
  RETURN_IF_ERROR(WriteCacheIndex(options.cache_dir, index));
  report.seconds = SecondsSince(started);
  report.seconds_per_encoded_sample = report.encoded > 0 ? encode_seconds / static_cast<double>(report.encoded) : 0;
  return report;
}

}  // namespace baton
