// The Wan 2.x transformer (diffusers' WanTransformer3DModel) cut into the pieces a pipeline needs: WanShell (run
// by the coordinator) and WanStage (a range of blocks). Shell + WanStage(all blocks, embedders, head) is exactly
// diffusers' WanTransformer3DModel.forward.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/model_family.h"
#include "core/model/rope_cache.h"
#include "core/model/wan_blocks.h"
#include "core/model/wan_config.h"

namespace baton {

// The RoPE tables of a post-patchify grid (f, h, w): (cos, sin) [f·h·w, Dh] fp32 on `device`, rows in f·h·w order,
// the head dim split t/h/w as diffusers' WanRotaryPosEmbed, theta 10000, fp64 angles.
std::pair<at::Tensor, at::Tensor> WanRopeTables(const WanConfig& c, int64_t f, int64_t h, int64_t w,
                                                at::Device device = at::kCPU);
std::string WanTablesKey(int64_t f, int64_t h, int64_t w);

// WanShell: condition_embedder: sinusoidal timestep -> time_embedder -> temb and time_proj -> timestep_proj
// [B, 6, D] (TI2V per-token timesteps: [B, S, 6, D]); text_embedder -> context; for Wan 2.1 I2V image_embedder on
// the CLIP tokens, prepended to the context; and the 3D RoPE tables of the latent grid (cached by key
// "wan_rope:FxHxW"). Run by the coordinator.
class WanShellImpl : public torch::nn::Module, public ShellModel {
 public:
  WanShellImpl(const WanConfig& c, const at::TensorOptions& options);
  // model_inputs: hidden_states [B, C, F, H, W], timestep [B] (0..1000) or [B, S] per token, encoder_hidden_states
  // [B, L, text_dim], encoder_hidden_states_image [B, 257, image_dim] (Wan 2.1 I2V).
  absl::StatusOr<ShellOutputs> Run(const TensorMap& model_inputs, at::ScalarType dtype) override;

 private:
  absl::Status CheckInputs(const TensorMap& in) const;
  WanConfig config_;
  WanLinear time_1_, time_2_, time_proj_, text_1_, text_2_, image_ff_1_, image_ff_2_;
  WanLayerNorm image_norm1_, image_norm2_;
  at::Tensor image_pos_embed_;
  RopeTableCache rope_;
};
TORCH_MODULE(WanShell);

// WanStage: patch_embedding (first stage), blocks [b, e), norm_out + scale_shift_table + proj_out + unpatchify
// (last stage).
// Wire names: stage 0 input "hidden_states" [B, C, F, H, W]; between stages "x" [B, S, D]; last stage "output"
// [B, C_out, F, H, W]. Constants: "temb", "timestep_proj", "context", "grid" (int64 [3]: F, H, W after
// patchify); tables: "rope_cos", "rope_sin" [S, Dh] fp32.
class WanStageImpl : public torch::nn::Module, public StageModel {
 public:
  WanStageImpl(const WanConfig& c, const StageRange& range, const at::TensorOptions& options);
  torch::nn::Module& module() override { return *this; }
  const StageRange& range() const override { return range_; }
  TensorMap Forward(const TensorMap& in, const TensorMap& constants) override;
  TensorMap ForwardCheckpointed(const TensorMap& in, const TensorMap& constants, std::vector<TensorMap>* checkpoints,
                                int64_t recompute_blocks) override;
  void BackwardFromCheckpoints(std::vector<TensorMap> checkpoints, const TensorMap& constants, const BackwardSeed& seed,
                               int64_t recompute_blocks) override;
  std::vector<torch::nn::Module*> BlockModules() override;
  void UseBlockSwap(std::shared_ptr<BlockSwap> swap) override { swap_ = std::move(swap); }

 private:
  std::vector<std::function<TensorMap(const TensorMap&)>> Pieces(const TensorMap& k);
  at::Tensor Head(const at::Tensor& x, const TensorMap& k);

  WanConfig config_;
  StageRange range_;
  at::Tensor patch_weight_, patch_bias_, head_table_;
  WanLinear proj_out_;
  std::vector<WanTransformerBlock> blocks_;
  std::shared_ptr<BlockSwap> swap_;  // null: every block resident
};
TORCH_MODULE(WanStage);

// All frozen parameter names and shapes of the complete model (shell + full stage), on the meta device.
std::vector<std::pair<std::string, std::vector<int64_t>>> WanParameterShapes(const WanConfig& c);

StageRange FullWanRange(const WanConfig& c);

// The checks WanShell::Run makes on the upstream forward's inputs (hidden_states [B, C, F, H, W], timestep [B] or
// [B, patches], encoder_hidden_states [B, L, text_dim], encoder_hidden_states_image exactly for the CLIP branch).
absl::Status CheckWanModelInputs(const WanConfig& config, const TensorMap& in);

}  // namespace baton
