#include "job_service/job_submission.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <vector>

#include "coordinator/job_plan.h"
#include "core/train/sweep.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

std::string Resolve(const std::string& path, const std::string& base) {
  if (path.empty() || path[0] == '/' || base.empty()) return path;
  return JoinPath(base, path);
}

// "job.yaml:4" for a top-level key (or "job.yaml" when the text does not show it).
std::string KeyPosition(const SubmittedJob& s, const std::string& key) {
  try {
    YAML::Node root = YAML::Load(s.yaml);
    YAML::Node node = root[key];
    if (node.IsDefined() && node.Mark().line >= 0) return absl::StrCat(s.job_file, ":", node.Mark().line + 1);
  } catch (const YAML::Exception&) {
  }
  return s.job_file;
}

}  // namespace

absl::StatusOr<JobConfig> ParseSubmittedJob(const SubmittedJob& submitted) {
  ASSIGN_OR_RETURN(JobConfig job, ParseJobYaml(submitted.yaml, submitted.job_file));
  if (!submitted.sweep_member.empty()) {
    ASSIGN_OR_RETURN(std::vector<SweepMember> members, ExpandSweep(job));
    auto member = std::find_if(members.begin(), members.end(),
                               [&](const SweepMember& m) { return m.name == submitted.sweep_member; });
    if (member == members.end()) {
      return absl::NotFoundError(
          absl::StrCat(submitted.job_file, ": its sweep has no member ", submitted.sweep_member, " any more"));
    }
    job = member->job;
  }
  const std::string& base = submitted.working_dir;
  job.model = Resolve(job.model, base);
  job.model_config = Resolve(job.model_config, base);
  job.dataset = Resolve(job.dataset, base);
  for (DatasetSource& d : job.datasets) d.path = Resolve(d.path, base);
  job.init_lora = Resolve(job.init_lora, base);
  job.validation.dataset = Resolve(job.validation.dataset, base);
  if (submitted.steps < 0) {  // the service's own check: another client may send one
    return absl::InvalidArgumentError(
        absl::StrCat(submitted.job_file, ": --steps ", submitted.steps, " is not a step count (>= 1; 0: the job's)"));
  }
  if (submitted.steps > kMaxJobSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat(submitted.job_file, ": --steps ", submitted.steps, " is over the limit of ", kMaxJobSteps));
  }
  if (submitted.steps > 0) job.steps = submitted.steps;
  return job;
}

absl::Status ValidateSubmittedJob(const SubmittedJob& submitted, const JobConfig& job, int stages,
                                  const std::string& data_root, std::string* frozen_key) {
  struct PathKey {
    const char* key;
    const std::string& path;
    bool needed;
  };
  std::vector<PathKey> keys = {{"model", job.model, true},
                               {"model_config", job.model_config, !job.model_config.empty()},
                               {"dataset", job.dataset, job.encode.encoder_worker.empty()},
                               {"init_lora", job.init_lora, !job.init_lora.empty()},
                               {"validation.dataset", job.validation.dataset, !job.validation.dataset.empty()},
                               // The encoder worker reads it (on its host): judged here, not required to exist here.
                               {"encode.images", job.encode.images, false},
                               {"encode.control", job.encode.control, false}};
  for (const std::string& file : job.samples.references) keys.push_back({"samples.references", file, true});
  for (const DatasetSource& d : job.datasets) keys.push_back({"datasets", d.path, true});
  // Inside the root first: a refusal must not depend on whether the file exists.
  for (const PathKey& k : keys) {
    if (data_root.empty() || k.path.empty()) continue;
    auto inside = ResolveForWriteInsideRoot(data_root, k.path, k.key);
    if (!inside.ok()) {
      const std::string key = std::string(k.key).substr(0, std::string(k.key).find('.'));  // the top-level key
      // The folder itself, not the flag as typed ("." means nothing to a user on another machine).
      return absl::PermissionDeniedError(absl::StrCat(KeyPosition(submitted, key), ": ", k.key, ": ", k.path,
                                                      " is outside the job service's --data_root ",
                                                      RealPath(data_root).value_or(data_root)));
    }
  }
  for (const PathKey& k : keys) {
    if (k.needed && !PathExists(k.path)) {
      return absl::InvalidArgumentError(absl::StrCat(KeyPosition(submitted, k.key), ": ", k.key, ": ", k.path,
                                                     " does not exist on the coordinator's host"));
    }
  }
  absl::Status plan = CheckJobPlan(job, stages, frozen_key);
  if (!plan.ok()) {
    const bool named = absl::StartsWith(plan.message(), submitted.job_file);
    return absl::InvalidArgumentError(absl::StrCat(named ? "" : submitted.job_file, named ? "" : ": ", plan.message()));
  }
  return absl::OkStatus();
}

std::string DefaultJobName(const std::string& job_file) {
  std::string name = job_file.substr(job_file.rfind('/') + 1);
  if (size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return SafeJobName(name);
}

std::string SafeJobName(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 64)) out += absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ? c : '_';
  return out.empty() || out[0] == '.' ? absl::StrCat("job", out) : out;
}

}  // namespace baton
