// `coordinator --resume`: which checkpoint a run continues from, and whether it may. A resume that cannot
// continue refuses instead of silently starting over: no checkpoint (unless --resume=if-any), every checkpoint
// corrupt (each named with why), a checkpoint of another job (each differing fingerprint key listed,
// "optimizer.lr: 0.001 → 0.002"), or tensors that do not fit the job's adapters.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <map>
#include <optional>
#include <string>

#include "coordinator/checkpoint.h"
#include "core/train/job_fingerprint.h"

namespace baton {

// The --resume flag: `--resume` / `--resume=true` must resume; `--resume=if-any` resumes when there is a
// checkpoint and starts fresh when there is none; `--resume=false` (default) starts fresh.
enum class ResumeMode { kOff, kMust, kIfAny };
bool AbslParseFlag(absl::string_view text, ResumeMode* mode, std::string* error);
std::string AbslUnparseFlag(ResumeMode mode);

// The checkpoint to continue from, or nullopt to start fresh (only with `if_any` and no checkpoint directory at
// all: the line "--resume=if-any: no checkpoint in DIR, starting fresh" is printed unless `quiet`). Refuses
// with FailedPrecondition when there is none, or when every one is corrupt (each named with its reason: a
// corrupt checkpoint means something went wrong, so not even if-any starts over on top of it). Skipped corrupt
// checkpoints are named on stderr.
absl::StatusOr<std::optional<TrainingState>> LoadResumeCheckpoint(const std::string& output_dir, bool if_any,
                                                                  bool quiet);

// The fingerprint as stored in a checkpoint's extra JSON ({"fingerprint": [[key, value], ...]}).
std::string FingerprintExtraJson(const JobFingerprint& fingerprint);

// FailedPrecondition unless the checkpoint was written by this job: its stored fingerprint equals `now`
// (the message lists each difference), or, for a checkpoint older than fingerprints, its job hash is `job_hash`.
absl::Status CheckResumeMatchesJob(const TrainingState& state, const std::string& output_dir, const JobFingerprint& now,
                                   const std::string& job_hash);

// DataLoss unless the checkpoint's tensors fit the job: its LoRA has exactly the names of `init` (the stages'
// fresh adapters) with their shapes, finite floating point; its optimizer state has a scalar integer
// "__step__" and, for each LoRA tensor, what the job's optimizer keeps (Optimizer::CheckState: AdamW's exp_avg and
// exp_avg_sq of its shape, Adafactor's, an EMA; none at all before step 1), and nothing else.
absl::Status CheckCheckpointTensors(const TrainingState& state, const std::map<std::string, at::Tensor>& init,
                                    const OptimizerConfig& optimizer);

}  // namespace baton
