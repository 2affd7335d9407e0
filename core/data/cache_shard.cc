#include "core/data/cache_shard.h"

#include <absl/strings/ascii.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <vector>

#include "core/util/files.h"
#include "core/util/sha256.h"
#include "core/util/status.h"

namespace baton {

std::string ShardSpec::ToString() const { return absl::StrCat(index, "/", count); }

bool ShardSpec::Contains(absl::string_view name) const { return ShardOfName(name, count) == index; }

int64_t ShardOfName(absl::string_view name, int64_t count) {
  if (count <= 1) return 0;
  Sha256 h;
  h.Update("baton-shard-v1");
  h.UpdateFramed(name);
  const Sha256::Digest digest = h.Finish();
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | digest[static_cast<size_t>(i)];
  return static_cast<int64_t>(value % static_cast<uint64_t>(count));
}

absl::StatusOr<ShardSpec> ParseShard(absl::string_view text) {
  const std::string quoted = absl::StrCat("--shard \"", text, "\": ");
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  ShardSpec spec;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &spec.index) || !absl::SimpleAtoi(parts[1], &spec.count)) {
    return absl::InvalidArgumentError(absl::StrCat(
        quoted, "expected i/N: this worker's share i of N workers, 0 <= i < N (e.g. 0/2 and 1/2 for two workers)"));
  }
  if (spec.count < 1 || spec.count > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat(quoted, "the worker count N must be between 1 and ", kMaxShards, ", not ", spec.count));
  }
  if (spec.index < 0 || spec.index >= spec.count) {
    return absl::InvalidArgumentError(absl::StrCat(quoted, "the share i must be one of 0 .. ", spec.count - 1,
                                                   " for N = ", spec.count, " workers, not ", spec.index));
  }
  return spec;
}

absl::StatusOr<std::optional<ShardSpec>> ReadCacheShard(const std::string& cache_dir) {
  const std::string path = JoinPath(cache_dir, kShardFile);
  ASSIGN_OR_RETURN(std::string text, ReadFileIfExists(path));
  if (text.empty()) return std::optional<ShardSpec>();
  auto spec = ParseShard(absl::StripAsciiWhitespace(text));
  if (!spec.ok()) return absl::DataLossError(absl::StrCat(path, ": ", spec.status().message()));
  return std::optional<ShardSpec>(*spec);
}

absl::Status WriteCacheShard(const std::string& cache_dir, const ShardSpec& shard) {
  RETURN_IF_ERROR(MakeDirs(cache_dir));
  return WriteFileAtomic(JoinPath(cache_dir, kShardFile), shard.ToString() + "\n");
}

}  // namespace baton
