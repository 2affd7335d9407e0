#include "core/data/cache_merge.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/data/cache.h"
#include "core/data/cache_shard.h"
#include "core/data/empty_prompt.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

// One shard folder as the merge reads it.
struct Shard {
  std::string dir;
  CacheIndex index;
  ShardSpec spec;
};

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool SameFolder(const std::string& a, const std::string& b) {
  auto ra = RealPath(a);
  auto rb = RealPath(b);
  return ra.ok() && rb.ok() && *ra == *rb;
}

// The builder names a record's file CacheRecordFile(id); an index naming anything else (a path out of the folder) is
// not taken.
bool IsRecordFile(const CacheRecordInfo& r) {
  return !r.id.empty() && r.id != "." && r.id != ".." && r.id.find('/') == std::string::npos &&
         r.file == CacheRecordFile(r.id);
}

// Reads the record back and holds it to its shard's index entry, as CacheReader::Load does, and to the encoder.
absl::Status CheckRecord(const Shard& shard, const CacheRecordInfo& r) {
  const std::string path = JoinPath(shard.dir, r.file);
  const std::string rerun = "; rerun that shard's encoder_worker to rebuild it";
  auto fail = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("cache record ", r.id, " (", path, "): ", why, rerun));
  };
  CacheRecordInfo found;
  std::string encoder;
  auto sample = ReadCacheRecord(shard.dir, r.file, shard.index.layout(), &found, &encoder);
  if (!sample.ok()) return absl::DataLossError(absl::StrCat(sample.status().message(), rerun));
  if (r.checksum.empty()) return fail("its shard's index records no checksum");
  if (found.checksum != r.checksum) {
    return fail(absl::StrCat("checksum of the tensor bytes is ", found.checksum, ", the index says ", r.checksum));
  }
  if (found.bytes != r.bytes) return fail(absl::StrCat("size ", found.bytes, " bytes, the index says ", r.bytes));
  if (encoder != shard.index.encoder || found.hash != r.hash || found.grid_h != r.grid_h || found.grid_w != r.grid_w ||
      found.text_len != r.text_len || found.frames != r.frames || found.bucket != r.bucket) {
    return fail("its metadata (encoder, hash, grid, text length, frames or bucket) differs from its shard's index");
  }
  return absl::OkStatus();
}

// Puts `from` at `to` atomically: a hard link where the filesystem allows, else a copy. True when linked.
absl::StatusOr<bool> Place(const std::string& from, const std::string& to) {
  const std::string tmp = absl::StrCat(to, ".tmp.", ::getpid());
  (void)::unlink(tmp.c_str());
  if (::link(from.c_str(), tmp.c_str()) == 0) {
    RETURN_IF_ERROR(RenameDurable(tmp, to));
    return true;
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(from));
  RETURN_IF_ERROR(WriteFileAtomic(to, bytes));
  return false;
}

// Reads every shard's index and checks that together they are all N shares of one split, by one encoder.
absl::StatusOr<std::vector<Shard>> ReadShards(const std::vector<std::string>& dirs) {
  std::vector<Shard> shards;
  std::map<int64_t, std::string> seen;  // share -> folder
  for (const std::string& dir : dirs) {
    Shard s;
    s.dir = dir;
    auto index = ReadCacheIndex(dir);
    if (!index.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("shard cache ", dir, ": ", index.status().message(),
                                                        " (has its encoder_worker --shard run finished?)"));
    }
    s.index = *std::move(index);
    ASSIGN_OR_RETURN(std::optional<ShardSpec> spec, ReadCacheShard(dir));
    if (!spec) {
      return absl::FailedPreconditionError(absl::StrCat("cache ", dir, " is not a shard: it has no ", kShardFile,
                                                        " (it was built without --shard i/N)"));
    }
    s.spec = *spec;
    if (!shards.empty()) {
      const Shard& first = shards.front();
      if (s.spec.count != first.spec.count) {
        return absl::FailedPreconditionError(absl::StrCat("shard cache ", dir, " is shard ", s.spec.ToString(), " but ",
                                                          first.dir, " is shard ", first.spec.ToString(),
                                                          ": all shards must come from one split into N"));
      }
      if (s.index.encoder != first.index.encoder || s.index.layout() != first.index.layout()) {
        return absl::InvalidArgumentError(absl::StrCat("shard cache ", dir, " was encoded by ", s.index.encoder, " (",
                                                       s.index.layout().ToString(), "), ", first.dir, " by ",
                                                       first.index.encoder, " (", first.index.layout().ToString(),
                                                       "): every shard must use the same encoder"));
      }
    }
    if (auto it = seen.find(s.spec.index); it != seen.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard caches ", it->second, " and ", dir, " are both shard ", s.spec.ToString()));
    }
    seen[s.spec.index] = dir;
    shards.push_back(std::move(s));
  }
  const int64_t count = shards.front().spec.count;
  if (static_cast<int64_t>(shards.size()) != count) {
    std::vector<std::string> missing;
    for (int64_t i = 0; i < count; ++i) {
      if (!seen.count(i)) missing.push_back(absl::StrCat(i, "/", count));
    }
    return absl::FailedPreconditionError(absl::StrCat("the merge needs all ", count,
                                                      " shards of the split; missing: ", absl::StrJoin(missing, ", "),
                                                      " (give every shard's --cache folder to --merge)"));
  }
  return shards;
}

}  // namespace

absl::StatusOr<CacheMergeReport> MergeShardCaches(const std::vector<std::string>& shard_dirs,
                                                  const std::string& out_dir) {
  const auto started = Clock::now();
  if (shard_dirs.empty()) return absl::InvalidArgumentError("the merge needs the shard cache folders");
  for (const std::string& dir : shard_dirs) {
    if (SameFolder(dir, out_dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the merged cache ", out_dir, " is one of the shard folders: merge into a folder of its own"));
    }
  }
  ASSIGN_OR_RETURN(std::vector<Shard> shards, ReadShards(shard_dirs));
  ASSIGN_OR_RETURN(std::optional<ShardSpec> out_share, ReadCacheShard(out_dir));
  if (out_share) {
    return absl::FailedPreconditionError(absl::StrCat("the merged cache ", out_dir, " holds shard ",
                                                      out_share->ToString(),
                                                      " of a split: merge into a folder of its own"));
  }

  // Every record once, in id order: the order a single worker's scan gives its index.
  std::vector<std::pair<const CacheRecordInfo*, const Shard*>> records;
  std::map<std::string, std::string> holder;  // id -> shard folder
  for (const Shard& shard : shards) {
    for (const CacheRecordInfo& r : shard.index.records) {
      if (!IsRecordFile(r)) {
        return absl::DataLossError(absl::StrCat(shard.dir, "/index.json: record ", r.id, " names file ", r.file,
                                                ", not records/<id>.safetensors"));
      }
      if (!shard.spec.Contains(r.SampleName())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shard cache ", shard.dir, " (shard ", shard.spec.ToString(), ") holds record ", r.id,
            ", which belongs to shard ", ShardOfName(r.SampleName(), shard.spec.count), "/", shard.spec.count));
      }
      if (auto [it, fresh] = holder.emplace(r.id, shard.dir); !fresh) {
        return absl::FailedPreconditionError(
            absl::StrCat("record ", r.id, " is in both shard caches ", it->second, " and ", shard.dir));
      }
      records.push_back({&r, &shard});
    }
  }
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.first->id < b.first->id; });

  RETURN_IF_ERROR(MakeDirs(JoinPath(out_dir, "records")));
  // What the previous merge left: the only files the merge may delete, and the checksums it verified.
  std::map<std::string, std::string> previous;  // file -> checksum
  if (PathExists(JoinPath(out_dir, "index.json"))) {
    ASSIGN_OR_RETURN(CacheIndex before, ReadCacheIndex(out_dir));
    for (const CacheRecordInfo& r : before.records) previous[r.file] = r.checksum;
  }

  CacheMergeReport report;
  report.shards = static_cast<int64_t>(shards.size());
  const CacheIndex& first = shards.front().index;
  CacheIndex merged = CacheIndex::For(first.encoder, first.layout());
  std::set<std::string> live;
  for (const auto& record : records) {
    const CacheRecordInfo& r = *record.first;
    const Shard& shard = *record.second;
    const std::string from = JoinPath(shard.dir, r.file);
    const std::string to = JoinPath(out_dir, r.file);
    auto was = previous.find(r.file);
    if (was != previous.end() && !r.checksum.empty() && was->second == r.checksum && SameFile(from, to)) {
      ++report.unchanged;  // linked and checked by the previous merge; records are never rewritten in place
    } else {
      RETURN_IF_ERROR(CheckRecord(shard, r));
      ASSIGN_OR_RETURN(bool linked, Place(from, to));
      ++(linked ? report.linked : report.copied);
    }
    merged.records.push_back(r);
    live.insert(r.file);
  }
  std::error_code ec;
  for (const auto& entry : previous) {
    const std::string& file = entry.first;
    if (!live.count(file) && absl::StartsWith(file, "records/") && file.find("..") == std::string::npos &&
        std::filesystem::remove(JoinPath(out_dir, file), ec)) {
      ++report.removed;
    }
  }
  // The empty caption is the same in every shard (one encoder): the first shard's that has one, checked and copied.
  for (const Shard& shard : shards) {
    if (!shard.index.empty_prompt.present()) continue;
    ASSIGN_OR_RETURN(at::Tensor empty,
                     ReadEmptyPrompt(shard.dir, first.layout(), shard.index.empty_prompt, first.encoder));
    ASSIGN_OR_RETURN(merged.empty_prompt, WriteEmptyPrompt(out_dir, first.encoder, empty));
    break;
  }
  RETURN_IF_ERROR(WriteCacheIndex(out_dir, merged));
  report.records = static_cast<int64_t>(merged.records.size());
  report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return report;
}

}  // namespace baton
