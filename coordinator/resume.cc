#include "coordinator/resume.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/tensor/shape.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kFingerprintKey[] = "fingerprint";

// The fingerprint stored in a checkpoint's extra JSON; nullopt when it has none (written before fingerprints).
absl::StatusOr<std::optional<JobFingerprint>> StoredFingerprint(const TrainingState& state, const std::string& dir) {
  nlohmann::json extra = nlohmann::json::parse(state.extra_json, nullptr, /*allow_exceptions=*/false);
  if (extra.is_discarded() || !extra.is_object() || !extra.contains(kFingerprintKey)) return std::nullopt;
  const nlohmann::json& list = extra[kFingerprintKey];
  auto bad = [&] {
    return absl::DataLossError(
        absl::StrCat(dir, "/state.json: extra.fingerprint is not a list of [key, value] strings"));
  };
  if (!list.is_array()) return bad();
  JobFingerprint f;
  for (const auto& pair : list) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) return bad();
    f.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  }
  return f;
}

absl::Status CheckLora(const TrainingState& state, const std::map<std::string, at::Tensor>& init,
                       const std::string& where) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(where, " lora.safetensors: ", why));
  };
  for (const auto& [name, want] : init) {
    auto it = state.lora.find(name);
    if (it == state.lora.end()) return bad(absl::StrCat("lacks ", name, " (the job's LoRA has it)"));
    const at::Tensor& t = it->second;
    if (!at::isFloatingType(t.scalar_type())) {
      return bad(absl::StrCat(name, " has dtype ", c10::toString(t.scalar_type()), ", expected floating point"));
    }
    if (t.sizes() != want.sizes()) {
      return bad(
          absl::StrCat(name, " has shape ", ShapeString(t.sizes()), ", the job's LoRA ", ShapeString(want.sizes())));
    }
    if (!at::isfinite(t).all().item<bool>()) return bad(absl::StrCat(name, " holds non-finite values"));
  }
  for (const auto& [name, t] : state.lora) {
    if (!init.count(name)) return bad(absl::StrCat("has ", name, ", which the job's LoRA does not"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptimizer(const TrainingState& state, const OptimizerConfig& optimizer, const std::string& where) {
  const std::string file = absl::StrCat(where, " optimizer.safetensors: ");
  auto bad = [&](absl::string_view why) { return absl::DataLossError(absl::StrCat(file, why)); };
  auto step = state.optimizer.find(kOptimizerStepKey);
  if (step == state.optimizer.end()) return bad("lacks __step__");
  const at::Tensor& s = step->second;
  if (s.numel() != 1 || at::isFloatingType(s.scalar_type()) || s.scalar_type() == at::kBool) {
    return bad(absl::StrCat("__step__ must be one integer, is ", DtypeShapeString(s)));
  }
  // Every state tensor the job's optimizer keeps after its first step (and none before), of its shape.
  return Optimizer(optimizer).CheckState(state.lora, state.optimizer, file);
}

}  // namespace

bool AbslParseFlag(absl::string_view text, ResumeMode* mode, std::string* error) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "t" || t == "y") {
    *mode = ResumeMode::kMust;
  } else if (t == "false" || t == "0" || t == "no" || t == "f" || t == "n") {
    *mode = ResumeMode::kOff;
  } else if (t == "if-any" || t == "if_any") {
    *mode = ResumeMode::kIfAny;
  } else {
    *error = "expected true (must resume), if-any (resume when there is a checkpoint) or false";
    return false;
  }
  return true;
}

std::string AbslUnparseFlag(ResumeMode mode) {
  switch (mode) {
    case ResumeMode::kMust:
      return "true";
    case ResumeMode::kIfAny:
      return "if-any";
    case ResumeMode::kOff:
      break;
  }
  return "false";
}

absl::StatusOr<std::optional<TrainingState>> LoadResumeCheckpoint(const std::string& output_dir, bool if_any,
                                                                  bool quiet) {
  std::vector<std::string> skipped;
  auto state = LoadLatestCheckpoint(output_dir, &skipped);
  for (const std::string& why : skipped)
    std::fprintf(stderr, "--resume: skipping corrupt checkpoint %s\n", why.c_str());
  if (state.ok()) return std::optional<TrainingState>(std::move(*state));
  if (!absl::IsNotFound(state.status())) return state.status();
  const std::string where = JoinPath(output_dir, "checkpoints");
  if (!skipped.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("--resume: no valid checkpoint in ", where,
                                                      ": every one is corrupt (", absl::StrJoin(skipped, "; "),
                                                      "); remove them to start over, or use another --output"));
  }
  if (!if_any) {
    return absl::FailedPreconditionError(
        absl::StrCat("--resume: no checkpoint in ", where,
                     "; nothing to continue (--resume=if-any starts fresh when there is none)"));
  }
  if (!quiet) std::printf("--resume=if-any: no checkpoint in %s, starting fresh\n", where.c_str());
  return std::optional<TrainingState>();
}

std::string FingerprintExtraJson(const JobFingerprint& fingerprint) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [key, value] : fingerprint) list.push_back({key, value});
  return nlohmann::json{{kFingerprintKey, list}}.dump();
}

absl::Status CheckResumeMatchesJob(const TrainingState& state, const std::string& output_dir, const JobFingerprint& now,
                                   const std::string& job_hash) {
  const std::string dir = CheckpointDir(output_dir, state.step);
  ASSIGN_OR_RETURN(std::optional<JobFingerprint> stored, StoredFingerprint(state, dir));
  if (!stored) {  // written before fingerprints: the old, coarser job hash
    if (state.job_hash == job_hash) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", dir, " is from another job (job hash ", state.job_hash, " vs ", job_hash, ")"));
  }
  std::vector<std::string> diffs = FingerprintDifferences(*stored, now);
  if (diffs.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("checkpoint ", dir,
                                                    " was written by a job that trains differently; refusing to "
                                                    "resume (checkpoint → this job):\n  ",
                                                    absl::StrJoin(diffs, "\n  ")));
}

absl::Status CheckCheckpointTensors(const TrainingState& state, const std::map<std::string, at::Tensor>& init,
                                    const OptimizerConfig& optimizer) {
  const std::string where = absl::StrCat("checkpoint step-", state.step, ":");
  RETURN_IF_ERROR(CheckLora(state, init, where));
  return CheckOptimizer(state, optimizer, where);
}

}  // namespace baton
