#include "stage_driver/driver_options.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <functional>

#include "core/pipeline/replica_split.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

namespace {

// "a:1, b:1" or "a:1 b:1" → {"a:1", "b:1"}.
std::vector<std::string> Addresses(absl::string_view group) {
  std::vector<std::string> out;
  for (absl::string_view a : absl::StrSplit(group, absl::ByAnyChar(", \t"), absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(a));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::string>>> ParseWorkerGroups(const std::string& flag) {
  std::vector<std::vector<std::string>> groups;
  if (absl::StartsWith(flag, "@")) {
    const std::string path = flag.substr(1);
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = line.substr(0, line.find('#'));
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      groups.push_back(Addresses(line));
    }
    if (groups.empty()) return absl::InvalidArgumentError(absl::StrCat("--workers @", path, ": no replica lines"));
    return groups;
  }
  for (absl::string_view group : absl::StrSplit(flag, ';')) {
    groups.push_back(Addresses(group));
    if (groups.back().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers '", flag, "': replica group ", groups.size() - 1, " lists no address"));
    }
  }
  return groups;
}

absl::Status ApplyWorkerGroups(const std::vector<std::vector<std::string>>& groups, StageDriverOptions& options) {
  options.workers.clear();
  for (const auto& group : groups) options.workers.insert(options.workers.end(), group.begin(), group.end());
  if (groups.size() < 2) return absl::OkStatus();  // one list: --replicas and --stages say how to cut it
  const int count = static_cast<int>(groups.size());
  if (options.replicas != 0 && options.replicas != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers gives ", count, " replica groups but --replicas is ", options.replicas));
  }
  options.replicas = count;
  options.replica_stages.clear();
  for (const auto& group : groups) options.replica_stages.push_back(static_cast<int>(group.size()));
  if (options.UnequalReplicas()) {  // each group is one replica's stages
    options.stages = options.replica_stages[0];
    return absl::OkStatus();
  }
  options.replica_stages.clear();
  for (int r = 0; r < count; ++r) {
    if (static_cast<int>(groups[r].size()) != options.stages) {
      return absl::InvalidArgumentError(absl::StrCat("--workers: replica ", r, " lists ", groups[r].size(),
                                                     " addresses for --stages ", options.stages, " (",
                                                     absl::StrJoin(groups[r], ","), ")"));
    }
  }
  return absl::OkStatus();
}

int StageDriverOptions::FirstWorker(int replica) const {
  int first = 0;
  for (int r = 0; r < replica; ++r) first += StagesOf(r);
  return first;
}

bool StageDriverOptions::UnequalReplicas() const { return UnequalStageCounts(replica_stages); }

absl::Status CheckStageDriverOptions(const StageDriverOptions& options) {
  if (options.stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  if (options.replicas < 1) return absl::InvalidArgumentError("--replicas must be ≥ 1");
  if (!options.replica_stages.empty()) {
    if (static_cast<int>(options.replica_stages.size()) != options.replicas) {
      return absl::InvalidArgumentError(absl::StrCat("replica_stages lists ", options.replica_stages.size(),
                                                     " stage counts for ", options.replicas, " replicas"));
    }
    for (int s : options.replica_stages) {
      if (s < 1) return absl::InvalidArgumentError("replica_stages: every replica needs ≥ 1 stage");
    }
  }
  const int workers = options.TotalWorkers();
  if (!options.workers.empty() && static_cast<int>(options.workers.size()) != workers) {
    if (options.replicas == 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers lists ", options.workers.size(), " addresses for ", options.stages, " stages"));
    }
    const std::string shape =
        options.UnequalReplicas()
            ? absl::StrCat(options.replicas, " replicas of ", absl::StrJoin(options.replica_stages, "+"), " stages")
            : absl::StrCat(options.replicas, " replicas of ", options.stages, " stages");
    return absl::InvalidArgumentError(absl::StrCat("--workers lists ", options.workers.size(), " addresses for ", shape,
                                                   " (", workers,
                                                   ": replica 0's stages first, then replica 1's, ...)"));
  }
  return absl::OkStatus();
}

}  // namespace baton
