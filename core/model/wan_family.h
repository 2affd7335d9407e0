// WanFamily: Wan 2.x (diffusers' WanTransformer3DModel) behind the ModelFamily interface. One block kind,
// "block"; the shell is condition_embedder + RoPE tables; wire names as wan_model.h documents.
// A Wan 2.2 A14B folder holds two experts: open each with its WanExpert (a LoRA per expert).
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <string>
#include <vector>

#include "core/model/model_family.h"
#include "core/model/wan_weights.h"

namespace baton {

class WanFamily : public ModelFamily {
 public:
  // The default expert (a pipeline's transformer/); OpenWanModel picks another.
  static absl::StatusOr<std::unique_ptr<ModelFamily>> Open(const std::string& path, const std::string& config_path);
  explicit WanFamily(std::unique_ptr<WanCheckpoint> checkpoint)
      : config_(checkpoint->config()), checkpoint_(std::move(checkpoint)) {}
  // Config only (the planner): plans, names and checks the wire, builds no model.
  explicit WanFamily(WanConfig config) : config_(std::move(config)) {}
  const WanConfig& config() const { return config_; }
  const WanCheckpoint& checkpoint() const { return *checkpoint_; }  // only with weights

  std::string name() const override { return "wan"; }
  std::string config_json() const override;
  int64_t num_blocks() const override;
  int64_t hidden_size() const override;
  std::vector<std::string> WeightFiles() const override {
    return checkpoint_ ? checkpoint_->FilePaths() : std::vector<std::string>{};
  }

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
  at::Tensor LossMask(const NoisyBatch& batch) const override;

  absl::StatusOr<std::vector<std::string>> LoraTargets(const std::string& preset_or_list) const override;
  // The original/ComfyUI naming ("diffusion_model.blocks.N.self_attn.q"), core/lora/wan_lora_names.h.
  absl::StatusOr<TensorMap> LoraToOriginalNames(const TensorMap& peft) const override;
  absl::StatusOr<TensorMap> LoraFromOriginalNames(const TensorMap& original) const override;
  absl::Status CheckOriginalNaming(const LoraSpec& spec) const override;

 private:
  WanConfig config_;
  std::unique_ptr<WanCheckpoint> checkpoint_;  // null: config only
};

// True when the config that `path` (folder, pipeline folder or, with `config_path`, single file) carries names
// a Wan transformer: `_class_name` WanTransformer3DModel (diffusers) or WanModel (original).
bool IsWanModel(const std::string& path, const std::string& config_path = "");

absl::StatusOr<std::unique_ptr<WanFamily>> OpenWanModel(const std::string& path, const std::string& config_path = "",
                                                        WanExpert expert = WanExpert::kDefault);

}  // namespace baton
