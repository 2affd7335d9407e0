// One worker's share of a dataset when N encoder workers (processes or hosts) encode it together: `encoder_worker
// --shard i/N` encodes only the samples whose name hashes to share i, into a cache folder of its own marked by a file
// DIR/shard.txt ("i/N"); cache_merge.h (encoder_worker --merge, the coordinator's encode step) joins them. A share is a
// function of the sample's name alone, so adding, removing or editing other samples never moves a sample to another
// worker, and each worker's reruns keep its records exactly as a single worker's do.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <optional>
#include <string>

namespace baton {

struct ShardSpec {
  int64_t index = 0;  // this worker's share, 0 <= index < count
  int64_t count = 1;  // workers sharing the dataset
  // "i/N", as the flag and the cache index write it.
  std::string ToString() const;
  // Whether the sample named `name` (its file or folder name: the record id) is this worker's.
  bool Contains(absl::string_view name) const;
};

// The share of the sample named `name` among `count` workers: the first 8 bytes of SHA-256("baton-shard-v1", name)
// (framed), big-endian, modulo `count`. Stable across runs, machines and dataset changes.
int64_t ShardOfName(absl::string_view name, int64_t count);

// Parses "i/N" (0 <= i < N, 1 <= N <= kMaxShards). INVALID_ARGUMENT quoting the value and saying what is expected.
absl::StatusOr<ShardSpec> ParseShard(absl::string_view text);

inline constexpr int64_t kMaxShards = 4096;

// The marker of a shard's cache folder, written before its first record (so even a run killed before it wrote an
// index has one): "i/N" and a newline. A whole-dataset cache has none.
inline constexpr char kShardFile[] = "shard.txt";

// The share `cache_dir` was built for; nullopt when it has no marker (a whole-dataset cache, or nothing yet).
// DATA_LOSS naming the file when the marker does not parse.
absl::StatusOr<std::optional<ShardSpec>> ReadCacheShard(const std::string& cache_dir);
absl::Status WriteCacheShard(const std::string& cache_dir, const ShardSpec& shard);

}  // namespace baton
