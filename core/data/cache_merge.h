// Joins the caches N encoder workers wrote for their shares of one dataset (encoder_worker --shard i/N, cache_shard.h)
// into one cache, the same as one worker would have written for the whole dataset: the same record files, byte for
// byte, and the same index. Every record is read back and checked against its shard's index before it is taken, so a
// torn or corrupt record stops the merge instead of reaching training. Records are hard-linked where the folders
// share a filesystem (records are only ever replaced by rename, never written in place), else copied; the index is
// written last, atomically, so an interrupted merge leaves the previous merged cache readable. Reruns are cheap.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

struct CacheMergeReport {
  int64_t shards = 0;
  int64_t records = 0;    // in the merged index
  int64_t linked = 0;     // hard links made
  int64_t copied = 0;     // copied (another filesystem)
  int64_t unchanged = 0;  // already the same file in the merged cache (a rerun)
  int64_t removed = 0;    // records of the previous merged index whose sample is gone
  double seconds = 0;
};

// `shard_dirs`: one cache folder per share i of N, all N of them, written by the same encoder (identity, channels,
// text width). `out_dir` is none of them. FAILED_PRECONDITION naming the folder for a missing, repeated or foreign
// share, a shard whose run has not finished (no index) or a record that two shards both hold; DATA_LOSS naming
// the record for one that does not read back as its shard's index says.
absl::StatusOr<CacheMergeReport> MergeShardCaches(const std::vector<std::string>& shard_dirs,
                                                  const std::string& out_dir);

}  // namespace baton
