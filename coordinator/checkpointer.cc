#include "coordinator/checkpointer.h"

#include <chrono>
#include <cstdio>

#include "coordinator/checkpoint.h"
#include "coordinator/resume.h"
#include "core/train/common.h"
#include "core/util/status.h"

namespace baton {

absl::Status CheckpointRun(const JobConfig& job, const CoordinatorOptions& options, const std::string& job_hash,
                           const JobFingerprint& fingerprint, int64_t step,
                           const std::map<std::string, at::Tensor>& master, const Optimizer& optimizer,
                           const ModelFamily& model) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainingState state;
  state.step = step;
  state.lora = master;
  state.optimizer = optimizer.StateDict();
  state.job_hash = job_hash;
  state.extra_json = FingerprintExtraJson(fingerprint);  // checked by a --resume (coordinator/resume.h)
  RETURN_IF_ERROR(WriteCheckpoint(options.output_dir, state));
  RETURN_IF_ERROR(SaveLoraOutputs(options.output_dir, master, job, step, model, state.optimizer));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!options.quiet) std::printf("checkpoint step-%lld written in %.2f s\n", static_cast<long long>(step), seconds);
  if (options.hooks.on_checkpoint) options.hooks.on_checkpoint(step, seconds);
  return absl::OkStatus();
}

}  // namespace baton
