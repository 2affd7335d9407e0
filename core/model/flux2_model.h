// The FLUX.2 transformer cut into the pieces a pipeline needs: Flux2Shell (the small frozen part every block
// depends on) and Flux2Stage (a contiguous range of blocks). Shell + Stage(all blocks, embedders, head) is exactly
// diffusers' Flux2Transformer2DModel.forward.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/lora/lora_linear.h"
#include "core/model/flux2_blocks.h"
#include "core/model/flux2_config.h"

namespace baton {

class BlockSwap;

// Per micro-batch constants, sent to every stage alongside the activations.
struct Flux2Constants {
  at::Tensor mod_img;     // [B, 6D] double_stream_modulation_img(temb)
  at::Tensor mod_txt;     // [B, 6D] double_stream_modulation_txt(temb)
  at::Tensor mod_single;  // [B, 3D] single_stream_modulation(temb)
  at::Tensor mod_out;     // [B, 2D] norm_out.linear(silu(temb)), (scale, shift) order
  at::Tensor rope_cos;    // [St+Si, Dh] fp32, text rows first
  at::Tensor rope_sin;    // [St+Si, Dh] fp32
  // With reference images (img_ids holding tokens of time != 0, flux2_ops.h TargetTokens): the leading image tokens
  // that are the target's, the only ones the head predicts (Flux2Pipeline keeps noise_pred[:, :latents.size(1)]);
  // 0: every image token is the target's.
  int64_t target_tokens = 0;
};

// Flux2Shell: time/guidance embedding → the shared modulation vectors (img, txt, single, norm_out) and the RoPE
// tables. Run by the coordinator.
class Flux2ShellImpl : public torch::nn::Module {
 public:
  Flux2ShellImpl(const Flux2Config& c, const at::TensorOptions& options);
  // timestep [B] in 0..1, guidance [B] (ignored without guidance_embeds), img_ids [Si, 4], txt_ids [St, 4], on any
  // device (moved to the shell's); img_ids may end with reference images' ids (target_tokens). Modulations come out in
  // `dtype` (the compute dtype), RoPE tables in fp32, all on the shell's device.
  Flux2Constants forward(const at::Tensor& timestep, const at::Tensor& guidance, const at::Tensor& img_ids,
                         const at::Tensor& txt_ids, at::ScalarType dtype);
  // The modulation part only (no RoPE): temb → the four flat modulation tensors.
  Flux2Constants Modulations(const at::Tensor& timestep, const at::Tensor& guidance, at::ScalarType dtype);
  // The RoPE part only: (cos, sin) [St+Si, Dh] fp32 on the shell's device, text rows first.
  std::pair<at::Tensor, at::Tensor> Rope(const at::Tensor& img_ids, const at::Tensor& txt_ids);
  at::Device device() const { return t_linear_1_->weight.device(); }

 private:
  Flux2Config config_;
  std::shared_ptr<torch::nn::Module> time_guidance_embed_;
  LoraLinear t_linear_1_{nullptr}, t_linear_2_{nullptr}, g_linear_1_{nullptr}, g_linear_2_{nullptr};
  LoraLinear mod_img_{nullptr}, mod_txt_{nullptr}, mod_single_{nullptr}, norm_out_linear_{nullptr};
};
TORCH_MODULE(Flux2Shell);

struct Flux2StageRange {
  int64_t block_begin = 0;  // global block index; double blocks are [0, num_layers)
  int64_t block_end = 0;
  bool has_embedders = false;
  bool has_head = false;
  static Flux2StageRange Full(const Flux2Config& c) { return {0, c.num_blocks(), true, true}; }
};

// What crosses a stage boundary. In the double-stream part it is the pair (img, txt); from the first
// single block on it is the joined sequence [txt, img].
struct Flux2Activations {
  at::Tensor img;     // [B, Si, D] (stage 0 input: [B, Si, in_channels] before x_embedder)
  at::Tensor txt;     // [B, St, D] (stage 0 input: [B, St, joint_attention_dim])
  at::Tensor joint;   // [B, St+Si, D] once in single blocks
  at::Tensor output;  // [B, Si, out_dim] set by the last stage (Si: the target's tokens, Flux2Constants::target_tokens)
  int64_t txt_len = 0;
  // The tensors that are live (defined), in a fixed order: img, txt, joint, output.
  std::vector<at::Tensor> Live() const;
};

// Flux2Stage: a contiguous range of blocks [begin, end) (double blocks first, then single blocks), plus
// x_embedder/context_embedder when it is the first stage and norm_out/proj_out when it is the last. Parameter
// names are the global diffusers names whatever the range.
class Flux2StageImpl : public torch::nn::Module {
 public:
  Flux2StageImpl(const Flux2Config& c, const Flux2StageRange& range, const at::TensorOptions& options);
  Flux2Activations forward(const Flux2Activations& in, const Flux2Constants& k);

  // Activation checkpointing per block. ForwardCheckpointed runs the stage without a graph and keeps each
  // piece's input (embedders, each block, the double->single join, the head): `checkpoints` ends up with
  // one entry per piece, the first being `in` itself. BackwardFromCheckpoints then, from the last piece
  // back, recomputes one piece with a graph and back-propagates through it, dropping each checkpoint once
  // used. Memory: the checkpoints (one hidden-sized tensor per block) plus ONE block's graph, instead of the
  // whole stage's graph; compute: one extra forward, as with any recompute. `seed` receives the recomputed
  // stage output and returns the tensors to start backward from and their gradients (empty = ones, e.g.
  // a scalar loss). LoRA gradients accumulate into .grad and input gradients land in the .grad of the
  // first checkpoint's tensors that require grad, bitwise as forward() + backward would give them (the
  // same ops in the same order; LoRA dropout masks are re-drawn from their per-call seed).
  //
  // Hybrid (recompute only where memory requires it): with 0 <= recompute_blocks < the stage's block count,
  // only the pieces up to and including the first `recompute_blocks` blocks (and the embedders before them)
  // are checkpointed; the rest of the stage runs with its graph, from a leaf that collects the gradient
  // for the recomputed part. `checkpoints` then holds the checkpointed pieces' inputs, that leaf and the
  // graph tail's output (the forward's return value). recompute_blocks = 0 keeps the whole graph;
  // kAllBlocks (or >= the block count) is full per-block recompute. Pass the same value to both calls.
  // Gradients are bitwise those of forward() + backward for every value.
  static constexpr int64_t kAllBlocks = -1;
  using BackwardSeed =
      std::function<std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>(const Flux2Activations& out)>;
  Flux2Activations ForwardCheckpointed(const Flux2Activations& in, const Flux2Constants& k,
                                       std::vector<Flux2Activations>* checkpoints,
                                       int64_t recompute_blocks = kAllBlocks);
  void BackwardFromCheckpoints(std::vector<Flux2Activations> checkpoints, const Flux2Constants& k,
                               const BackwardSeed& seed, int64_t recompute_blocks = kAllBlocks);

  const Flux2StageRange& range() const { return range_; }
  const Flux2Config& config() const { return config_; }

  // Block swap (core/model/block_swap.h): the blocks in order (double, then single), and the swap of the first
  // swap->blocks() of them; those must be recomputed (ForwardCheckpointed refuses fewer recompute_blocks, and forward()
  // refuses to record a graph).
  std::vector<torch::nn::Module*> BlockModules();
  void UseBlockSwap(std::shared_ptr<BlockSwap> swap) { swap_ = std::move(swap); }

 private:
  // The stage as a chain of pieces; forward() applies them in order.
  std::vector<std::function<Flux2Activations(const Flux2Activations&)>> Pieces(const Flux2Constants& k);
  // How many leading pieces of `pieces` a hybrid with `recompute_blocks` checkpoints (see above).
  size_t CheckpointedPieces(int64_t recompute_blocks, size_t pieces) const;

  Flux2Config config_;
  Flux2StageRange range_;
  LoraLinear x_embedder_{nullptr}, context_embedder_{nullptr}, proj_out_{nullptr};
  std::vector<Flux2TransformerBlock> double_blocks_;
  std::vector<Flux2SingleTransformerBlock> single_blocks_;
  std::shared_ptr<BlockSwap> swap_;  // null: every block resident
};
TORCH_MODULE(Flux2Stage);

// All frozen parameter names and shapes of the complete model, built on the meta device (no memory).
std::vector<std::pair<std::string, std::vector<int64_t>>> Flux2ParameterShapes(const Flux2Config& c);

// Full-model forward with diffusers' argument meanings (hidden_states [B, Si, C_in], encoder_hidden_states
// [B, St, joint_dim], timestep [B] in 0..1, guidance [B] or undefined, img_ids [Si,4], txt_ids [St,4]).
at::Tensor Flux2Forward(Flux2Shell& shell, Flux2Stage& stage, const at::Tensor& hidden_states,
                        const at::Tensor& encoder_hidden_states, const at::Tensor& timestep, const at::Tensor& guidance,
                        const at::Tensor& img_ids, const at::Tensor& txt_ids);

}  // namespace baton
