// Reading a job file's YAML (core/train/job.cc and the job's parts beside it): keys checked against the allowed
// ones, values converted with their file:line named in every error.
#pragma once

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/train/job.h"
#include "core/util/status.h"

namespace baton {

// "source:line" of `node` (the source alone when yaml-cpp knows no line).
std::string Where(const std::string& source, const YAML::Node& node);

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  // Checks that `map` is a mapping with only `allowed` keys.
  absl::Status Keys(const YAML::Node& map, const std::string& what, const std::set<std::string>& allowed) {
    if (!map.IsMap())
      return absl::InvalidArgumentError(absl::StrCat(Where(source_, map), ": ", what, " must be a mapping"));
    std::set<std::string> seen;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(source_, kv.first), ": a key in ", what,
                                                       " must be a plain name, not a list or mapping"));
      }
      std::string key = kv.first.as<std::string>();
      if (!allowed.count(key)) {
        return absl::InvalidArgumentError(absl::StrCat(Where(source_, kv.first), ": unknown key '", key, "' in ", what,
                                                       " (allowed: ", absl::StrJoin(allowed, ", "), ")"));
      }
      // YAML keeps the first of two equal keys and drops the second without a word: a job that says `steps: 30`
      // twice, the second time meaning it, would silently train the first.
      if (!seen.insert(key).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(source_, kv.first), ": '", key, "' appears twice in ", what, "; give it once"));
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Get(const YAML::Node& map, const std::string& key, T* out) {
    YAML::Node node = map[key];
    if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
    try {
      if constexpr (std::is_same_v<T, std::string>) RETURN_IF_ERROR(CheckStringSize(node, key));
      *out = node.as<T>();
    } catch (const YAML::Exception&) {
      return absl::InvalidArgumentError(absl::StrCat(Where(source_, node), ": '", key, "' has the wrong type"));
    }
    return absl::OkStatus();
  }

  // A list of at most `max` entries (`meaning` says what one entry is), counted before anything is converted.
  template <typename T>
  absl::Status GetList(const YAML::Node& map, const std::string& key, size_t max, const std::string& meaning,
                       std::vector<T>* out) {
    YAML::Node node = map[key];
    if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
    if (node.IsSequence() && node.size() > max) {
      return absl::InvalidArgumentError(absl::StrCat(Where(source_, node), ": '", key, "' lists ", node.size(),
                                                     " entries; at most ", max, " (", meaning, ")"));
    }
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) {
        if constexpr (std::is_same_v<T, std::string>) RETURN_IF_ERROR(CheckStringSize(item, key));
      }
    }
    return Get(map, key, out);
  }

  absl::Status CheckStringSize(const YAML::Node& node, const std::string& key) {
    if (!node.IsScalar() || node.Scalar().size() <= kMaxJobStringBytes) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(Where(source_, node), ": '", key, "' is ", node.Scalar().size(),
                                                   " bytes long; a value is at most ", kMaxJobStringBytes));
  }

  absl::Status Check(bool ok, const YAML::Node& map, const std::string& key, const std::string& rule) {
    if (ok) return absl::OkStatus();
    YAML::Node node = map[key];
    return absl::InvalidArgumentError(
        absl::StrCat(Where(source_, node.IsDefined() ? node : map), ": '", key, "' ", rule));
  }

 private:
  std::string source_;
};

// The job's optimizer and what steps beside it: `optimizer:` (the rate, AdamW's settings, the schedule) and `ema:`.
absl::Status ParseJobOptimizer(Reader& r, const YAML::Node& root, JobConfig& job);

}  // namespace baton
