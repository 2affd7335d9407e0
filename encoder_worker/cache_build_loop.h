// The loop both cache builders (cache_builder.h for images, video_cache_builder.h for clips) run once they have
// scanned their dataset: keep each record that is still good or encode it anew, drop the records of samples gone
// from the dataset, write the index, and count it all in the report, the progress callback and the encoder metrics.
#pragma once

#include <absl/status/statusor.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/data/cache.h"
#include "core/encode/sample_encoder.h"
#include "encoder_worker/cache_builder.h"
#include "encoder_worker/dataset.h"

namespace baton {

// One sample as the loop sees it: one record, or (a video cut into several clips) a group of them.
struct CacheBuildItem {
  std::string name;          // the record id (records/<name>.safetensors), or the group's (CacheRecordInfo::Group)
  std::string source_path;   // the file an encode error names
  std::string content_hash;  // a kept record must have been encoded from this
};

// Sorts `items` by name (bytewise: the order a merge of shard caches lists records in; at several resolutions
// "a.png@1024" before "a.png@512"), and `along` with them.
template <typename T>
void SortByRecordId(std::vector<CacheBuildItem>& items, std::vector<T>& along) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].name < items[b].name; });
  std::vector<CacheBuildItem> sorted_items;
  std::vector<T> sorted_along;
  for (size_t i : order) {
    sorted_items.push_back(std::move(items[i]));
    sorted_along.push_back(std::move(along[i]));
  }
  items = std::move(sorted_items);
  along = std::move(sorted_along);
}

// What a builder adds to the loop, for item i of the list.
struct CacheBuildSteps {
  // Whether an existing record that reads back whole, with the same content hash and encoder, also fits the
  // builder's other settings (the image bucket; a video record's frames).
  std::function<bool(size_t i, const CacheRecordInfo& existing)> record_fits;
  // Encodes item i and writes its records (one, or each clip of a video), made by `encoder_identity`.
  std::function<absl::StatusOr<std::vector<CacheRecordInfo>>(size_t i, const std::string& encoder_identity)> encode;
};

// `sample` (ReadCacheRecord of `file`, which filled `read`) when the previous index recorded no checksum for `file`
// or the same one as `read`; DataLoss naming the file otherwise (its bytes changed: the record is re-encoded).
absl::StatusOr<CacheSample> CheckRecordChecksum(const std::map<std::string, std::string>& checksums,
                                                const std::string& file, const CacheRecordInfo& read,
                                                absl::StatusOr<CacheSample> sample);

// Also keeps or (re)encodes the cache's empty-caption embedding (core/data/empty_prompt.h).
// `scan_errors` are the scan's per-file errors (reported, and counted as failed); `started` is when the build
// began (the report's seconds and the progress' elapsed_seconds count from it).
absl::StatusOr<CacheBuildReport> RunCacheBuild(SampleEncoder& encoder, const CacheBuildOptions& options,
                                               const std::vector<CacheBuildItem>& items,
                                               std::vector<FileError> scan_errors, const CacheBuildSteps& steps,
                                               std::chrono::steady_clock::time_point started,
                                               const std::function<void(const CacheBuildProgress&)>& on_progress);

}  // namespace baton
