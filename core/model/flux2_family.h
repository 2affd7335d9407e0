// FLUX.2 as a ModelFamily (core/model/model_family.h): Flux2Checkpoint and Flux2Config behind the interface, the
// Flux2Stage / Flux2Shell modules wrapped as StageModel / ShellModel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/model/flux2_config.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/model/model_family.h"

namespace baton {

// Tensor names are the ones stage_io.h puts on the wire, so the family changes no wire format:
//   stage input   first stage: hidden_states [b, Si, C_in], encoder_hidden_states [b, St, J] (any floating dtype)
//                 later ones:  img [b, Si, D] + txt [b, St, D]  |  joint [b, St+Si, D] + txt_len [] (int64)
//   constants     mod_img, mod_txt, mod_single, mod_out and the tables rope_cos, rope_sin (merged); target_tokens []
//                 (int64) when the image stream ends with reference images' tokens (Flux2Constants)
//   stage output  the next stage's input, or output [b, Si, C_out] from the head
class Flux2Family : public ModelFamily {
 public:
  // `checkpoint` may be null: a config-only family plans, names and checks the wire but builds no model.
  Flux2Family(Flux2Config config, std::unique_ptr<Flux2Checkpoint> checkpoint);
  static absl::StatusOr<std::unique_ptr<ModelFamily>> Open(const std::string& path, const std::string& config_path);

  std::string name() const override { return "flux2"; }
  std::string config_json() const override;
  int64_t num_blocks() const override { return config_.num_blocks(); }
  int64_t hidden_size() const override { return config_.inner_dim(); }
  std::vector<std::string> WeightFiles() const override;

  BlockPlanInfo Block(int64_t global_index, const PlanShape& shape) const override;
  BlockPlanInfo Embedders(const PlanShape& shape) const override;
  BlockPlanInfo Head(const PlanShape& shape) const override;
  std::string DescribeBlocks(int64_t begin, int64_t end) const override;

  absl::StatusOr<std::unique_ptr<StageModel>> BuildStage(const StageRange& range, at::ScalarType dtype,
                                                         at::Device device, const LoraSpec* lora, bool train,
                                                         WeightQuant quant,
                                                         const FrozenTensors* shared = nullptr) const override;
  absl::StatusOr<std::unique_ptr<ShellModel>> BuildShell(at::ScalarType dtype, at::Device device) const override;

  absl::Status CheckWire(WireKind kind, const TensorMap& tensors, at::ScalarType dtype) const override;

  absl::Status CheckModelInputs(const TensorMap& model_inputs, const std::string& source) const override;
  int64_t LatentTokens(at::IntArrayRef sample_latents) const override;
  absl::Status CheckCacheFits(const CacheContents& cache) const override;
  absl::StatusOr<TensorMap> MicroBatchInputs(const NoisyBatch& batch) const override;
  // The records' masks over the packed image tokens: [b, Si, 1].
  at::Tensor LossMask(const NoisyBatch& batch) const override;

  absl::StatusOr<std::vector<std::string>> LoraTargets(const std::string& preset_or_list) const override;
  absl::StatusOr<TensorMap> LoraToOriginalNames(const TensorMap& peft) const override;
  absl::StatusOr<TensorMap> LoraFromOriginalNames(const TensorMap& original) const override;
  absl::Status CheckOriginalNaming(const LoraSpec& spec) const override;

  const Flux2Config& config() const { return config_; }
  const Flux2Checkpoint* checkpoint() const { return checkpoint_.get(); }

 private:
  absl::StatusOr<const Flux2Checkpoint*> RequireCheckpoint(const char* what) const;

  Flux2Config config_;
  std::unique_ptr<Flux2Checkpoint> checkpoint_;
};

// The FLUX.2 modules, built with their weights from `checkpoint` (only the range's tensors are read). Stage: LoRA
// attached when `lora` is given; eval mode unless `train` (dropout); `quant` (the job's `quantize`) stores the
// blocks' frozen Linear weights in 8 bits while loading (a pre-quantized checkpoint is used as stored).
absl::StatusOr<Flux2Stage> BuildFlux2Stage(const Flux2Checkpoint& checkpoint, const Flux2StageRange& range,
                                           at::ScalarType dtype, at::Device device, const LoraSpec* lora, bool train,
                                           WeightQuant quant = WeightQuant::kNone,
                                           const FrozenTensors* shared = nullptr);
absl::StatusOr<Flux2Shell> BuildFlux2Shell(const Flux2Checkpoint& checkpoint, at::ScalarType dtype, at::Device device);

// The StageModel / ShellModel wrappers around modules built elsewhere (tests, benches); `dtype` is the stage's
// compute dtype, which the first stage converts the model inputs to.
std::unique_ptr<StageModel> WrapFlux2Stage(Flux2Stage stage, at::ScalarType dtype);
std::unique_ptr<ShellModel> WrapFlux2Shell(Flux2Shell shell, const Flux2Config& config);

// The stage input / output maps of a Flux2Activations (the names above; txt_len only with joint), and back.
TensorMap Flux2ActivationMap(const Flux2Activations& a, bool has_head);
absl::StatusOr<Flux2Activations> Flux2ActivationsFromMap(const TensorMap& t, bool first_stage);

}  // namespace baton
