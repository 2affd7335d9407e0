// Crash-safe training checkpoints: the coordinator's only durable state (master LoRA weights, optimizer
// moments, step). A checkpoint is the directory <output>/checkpoints/step-<N>/ holding lora.safetensors
// (PEFT names, fp32: the file users load), optimizer.safetensors and state.json — the manifest, written last,
// recording each file's size and SHA-256. The directory is built under a temporary name and renamed into
// place, so a crash leaves either the whole checkpoint or a *.tmp-* leftover that the next load removes.
// Not thread-safe per output_dir: one writer (the coordinator) at a time.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace baton {

struct TrainingState {
  int64_t step = 0;                             // optimizer steps completed
  std::map<std::string, at::Tensor> lora;       // fp32 master LoRA weights, PEFT names (no "transformer.")
  std::map<std::string, at::Tensor> optimizer;  // AdamW::StateDict() tensors, stored as given
  std::string job_hash;                         // the caller checks it against the job on resume
  std::string extra_json = "{}";                // free-form JSON object; round-trips as JSON, not byte-exact
};

// <output_dir>/checkpoints/step-<step>
std::string CheckpointDir(const std::string& output_dir, int64_t step);

// Writes <output_dir>/checkpoints/step-<state.step>/ : every file is written and fsynced inside
// step-<N>.tmp-<pid>/, state.json last, the directory fsynced, then renamed to step-<N> and the checkpoints
// directory fsynced. An existing step-<N> is replaced (atomic exchange where the filesystem supports it,
// else renamed aside first and removed after). Then keeps the newest `keep` complete checkpoints (0 = all),
// never deleting the one just written. LoRA tensors must be floating point; they are stored as fp32.
absl::Status WriteCheckpoint(const std::string& output_dir, const TrainingState& state, int keep = 3);

// The newest checkpoint that verifies: scans checkpoints/step-*/, deleting *.tmp-* leftovers of interrupted
// writes, and returns the highest step whose state.json parses and whose files match the recorded sizes
// and SHA-256. A corrupt one is skipped with a warning in favour of the next older. NotFound when none; its
// message names each corrupt one and why. `skipped` (optional) receives "step-<N>: <why>" per skipped one.
// Call while no checkpoint is being written to output_dir (it deletes temporary directories).
absl::StatusOr<TrainingState> LoadLatestCheckpoint(const std::string& output_dir,
                                                   std::vector<std::string>* skipped = nullptr);

// Loads and fully verifies one checkpoint. NotFound when step-<step> is absent; DataLoss when corrupt.
absl::StatusOr<TrainingState> LoadCheckpoint(const std::string& output_dir, int64_t step);

// Steps of the complete checkpoints, ascending: state.json parses and every recorded file has its recorded
// size (hashes are not checked here — that is LoadCheckpoint's job — so listing stays cheap for large
// files). Read-only. Empty when there is no checkpoints directory.
absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& output_dir);

}  // namespace baton
