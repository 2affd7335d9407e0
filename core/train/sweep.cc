#include "core/train/sweep.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <filesystem>
#include <set>

#include "core/util/status.h"

namespace baton {

std::vector<std::string> SweepKeys() { return {"optimizer.lr", "lora.rank", "lora.alpha", "seed", "dataset"}; }

namespace {

// The short name a member's folder uses for `key`.
std::string ShortName(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// A value as a folder name shows it: a dataset by its folder's name, no path separators.
std::string ValueName(const std::string& key, const std::string& value) {
  std::string v = key == "dataset" ? std::filesystem::path(value).lexically_normal().filename().string() : value;
  if (v.empty()) v = value;
  for (char& c : v) {
    if (c == '/' || c == '\\' || c == ' ') c = '-';
  }
  return v;
}

absl::Status Apply(const std::string& key, const std::string& value, JobConfig& job) {
  auto bad = [&](const std::string& rule) {
    return absl::InvalidArgumentError(absl::StrCat("sweep: ", key, " value '", value, "' ", rule));
  };
  if (key == "optimizer.lr") {
    if (!absl::SimpleAtod(value, &job.optimizer.lr) || !(job.optimizer.lr > 0)) return bad("must be a positive number");
    // As the job file's lr is checked: members that would train alike, or a rate under the schedule's floor.
    if (job.optimizer.type == "adafactor" && job.optimizer.adafactor.relative_step) {
      return bad("does not apply: Adafactor with relative_step sets its own rate (give relative_step: false)");
    }
    if (job.optimizer.schedule == "polynomial" && job.optimizer.lr <= 1e-7) {
      return bad("is not above the polynomial schedule's end rate 1e-7 (diffusers refuses it)");
    }
  } else if (key == "lora.rank") {
    if (!absl::SimpleAtoi(value, &job.lora.rank) || job.lora.rank <= 0) return bad("must be a positive integer");
    if (!job.lora_alpha_set) job.lora.alpha = static_cast<double>(job.lora.rank);
  } else if (key == "lora.alpha") {
    if (!absl::SimpleAtod(value, &job.lora.alpha) || !(job.lora.alpha > 0)) return bad("must be a positive number");
    job.lora_alpha_set = true;
  } else if (key == "seed") {
    if (!absl::SimpleAtoi(value, &job.seed)) return bad("must be a non-negative integer");
    job.lora.seed = job.seed;
  } else if (key == "dataset") {
    if (value.empty()) return bad("must be a cache folder");
    job.dataset = value;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep: '", key, "' cannot be swept (", absl::StrJoin(SweepKeys(), ", "), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<SweepMember>> ExpandSweep(const JobConfig& job) {
  if (job.sweep.empty()) return std::vector<SweepMember>{{"", job}};
  size_t count = 1;
  for (const auto& [key, values] : job.sweep) {
    count *= values.size();
    if (count > kMaxSweepMembers) {
      return absl::InvalidArgumentError(
          absl::StrCat("sweep: more than ", kMaxSweepMembers, " members (the product of the lists' lengths)"));
    }
  }
  std::vector<SweepMember> members;
  std::set<std::string> names;
  for (size_t m = 0; m < count; ++m) {
    SweepMember member{"", job};
    member.job.sweep.clear();
    std::vector<std::string> parts;
    size_t rest = m;
    std::vector<size_t> pick(job.sweep.size());
    for (size_t k = job.sweep.size(); k-- > 0;) {  // the last key changes fastest
      pick[k] = rest % job.sweep[k].second.size();
      rest /= job.sweep[k].second.size();
    }
    for (size_t k = 0; k < job.sweep.size(); ++k) {
      const auto& [key, values] = job.sweep[k];
      RETURN_IF_ERROR(Apply(key, values[pick[k]], member.job));
      parts.push_back(absl::StrCat(ShortName(key), "=", ValueName(key, values[pick[k]])));
    }
    member.name = absl::StrJoin(parts, "_");
    if (!names.insert(member.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sweep: two members would both be ", member.name, " (a value listed twice?)"));
    }
    member.job.sweep_member = member.name;
    member.job.name = absl::StrCat(JobName(job), ".", member.name);
    members.push_back(std::move(member));
  }
  return members;
}

}  // namespace baton
