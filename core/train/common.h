// Pieces every trainer shares (single-process and pipeline): dtype/device parsing, building a stage with
// its weights and adapters, the loss, the train log, and writing the LoRA files users load.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device/device.h"
#include "core/model/flux2_family.h"
#include "core/train/job.h"
#include "core/train/tensorboard.h"

namespace baton {

absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name);  // fp32 | bf16 | fp16

// Flow-matching loss: mean squared error in fp32. pred, target: the same shape ([b, Si, C] for FLUX.2). A defined
// `loss_mask` (weights in [0, 1], broadcastable to the target: ModelFamily::LossMask) makes each record's term the
// weighted mean Σ w·(pred − target)² / Σ w over its elements (0/1 weights: the mean over the elements kept), and the
// loss the mean of the records' terms.
// A defined `weighting` ([b], LossWeighting) multiplies each sample's squared errors (not the normalisation), as
// diffusers' trainers weight their loss.
at::Tensor FlowMatchingLoss(const at::Tensor& pred, const at::Tensor& target, const at::Tensor& loss_mask = {},
                            const at::Tensor& weighting = {});

// diffusers' compute_loss_weighting_for_sd3(scheme, sigmas) for the micro-batch's sigmas t [b]: sigma_sqrt 1/σ²,
// cosmap 2 / (π·(1 − 2σ + 2σ²)), fp32; undefined for "none" (every sample counts once).
at::Tensor LossWeighting(const std::string& scheme, const at::Tensor& sigmas);

// One JSON object per line, flushed after each line so a crash loses nothing already logged.
class JsonlWriter {
 public:
  static absl::StatusOr<std::unique_ptr<JsonlWriter>> Open(const std::string& path, bool append);
  ~JsonlWriter();
  absl::Status Append(const nlohmann::ordered_json& line);
  // Every later line also goes to TensorBoard (TensorBoardWriter::Record).
  void MirrorTo(std::unique_ptr<TensorBoardWriter> tensorboard) { tensorboard_ = std::move(tensorboard); }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// A run's log: <output_dir>/train_log.jsonl (appended to on a resume), mirrored to a new TensorBoard event file in
// <output_dir>/tensorboard/.
inline constexpr char kTensorBoardSubdir[] = "tensorboard";
absl::StatusOr<std::unique_ptr<JsonlWriter>> OpenTrainLog(const std::string& output_dir, bool append);

// Writes <dir>/lora.safetensors (diffusers/PEFT) and, if job.save_bfl, <dir>/bfl/lora_bfl.safetensors
// (BFL/ComfyUI). Without an EMA the diffusers file is the only .safetensors at the top, so load_lora_weights(dir)
// picks it; with one (`ema:`; its tensors in `optimizer_state`, Optimizer::StateDict's names) lora_ema.safetensors
// and bfl/lora_ema_bfl.safetensors hold it in the same namings, and load_lora_weights needs weight_name.
inline constexpr char kBflLoraSubdir[] = "bfl";
// The second file's naming is the family's (ModelFamily::LoraToOriginalNames).
absl::Status SaveLoraOutputs(const std::string& dir, const std::map<std::string, at::Tensor>& params,
                             const JobConfig& job, int64_t step, const ModelFamily& model,
                             const std::map<std::string, at::Tensor>& optimizer_state);
// Whether SaveLoraOutputs can write the job's adapters (save_bfl: the family's original naming), before a run.
absl::Status CheckLoraOutputsPossible(const JobConfig& job, const ModelFamily& model);

// Clones tensors to fp32 CPU (master copies, checkpoints).
std::map<std::string, at::Tensor> CloneToCpuFloat(const std::map<std::string, at::Tensor>& tensors);

}  // namespace baton
