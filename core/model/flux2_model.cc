#include "core/model/flux2_model.h"

#include <functional>
#include <utility>

#include "core/model/block_swap.h"
#include "core/model/checkpoint_chain.h"
#include "core/model/flux2_ops.h"

namespace baton {
namespace {

// Registers `child` under a dotted path of plain holder modules, creating them as needed, so names read
// like diffusers' (e.g. "time_guidance_embed.timestep_embedder.linear_1").
template <typename M>
M RegisterAt(torch::nn::Module& root, const std::vector<std::string>& path, M child) {
  torch::nn::Module* parent = &root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    auto children = parent->named_children();
    if (auto* found = children.find(path[i])) {
      parent = found->get();
    } else {
      parent = parent->register_module(path[i], std::make_shared<torch::nn::Module>()).get();
    }
  }
  return parent->register_module(path.back(), child);
}

}  // namespace

std::vector<at::Tensor> Flux2Activations::Live() const {
  std::vector<at::Tensor> out;
  for (const at::Tensor* t : {&img, &txt, &joint, &output}) {
    if (t->defined()) out.push_back(*t);
  }
  return out;
}

Flux2ShellImpl::Flux2ShellImpl(const Flux2Config& c, const at::TensorOptions& options) : config_(c) {
  const int64_t d = c.inner_dim(), ch = c.timestep_guidance_channels;
  t_linear_1_ = RegisterAt(*this, {"time_guidance_embed", "timestep_embedder", "linear_1"}, LoraLinear(ch, d, options));
  t_linear_2_ = RegisterAt(*this, {"time_guidance_embed", "timestep_embedder", "linear_2"}, LoraLinear(d, d, options));
  if (c.guidance_embeds) {
    g_linear_1_ =
        RegisterAt(*this, {"time_guidance_embed", "guidance_embedder", "linear_1"}, LoraLinear(ch, d, options));
    g_linear_2_ =
        RegisterAt(*this, {"time_guidance_embed", "guidance_embedder", "linear_2"}, LoraLinear(d, d, options));
  }
  mod_img_ = RegisterAt(*this, {"double_stream_modulation_img", "linear"}, LoraLinear(d, 6 * d, options));
  mod_txt_ = RegisterAt(*this, {"double_stream_modulation_txt", "linear"}, LoraLinear(d, 6 * d, options));
  mod_single_ = RegisterAt(*this, {"single_stream_modulation", "linear"}, LoraLinear(d, 3 * d, options));
  norm_out_linear_ = RegisterAt(*this, {"norm_out", "linear"}, LoraLinear(d, 2 * d, options));
}

Flux2Constants Flux2ShellImpl::Modulations(const at::Tensor& timestep, const at::Tensor& guidance,
                                           at::ScalarType dtype) {
  auto embed = [&](const at::Tensor& t, LoraLinear& l1, LoraLinear& l2) {
    at::Tensor features = TimestepFeatures(t.to(device(), dtype) * 1000, config_.timestep_guidance_channels).to(dtype);
    return l2(at::silu(l1(features)));
  };
  at::Tensor temb = embed(timestep, t_linear_1_, t_linear_2_);
  if (config_.guidance_embeds) {
    TORCH_CHECK(guidance.defined(), "this FLUX.2 config has guidance_embeds: a guidance value is required");
    temb = temb + embed(guidance, g_linear_1_, g_linear_2_);
  }
  at::Tensor act = at::silu(temb);
  Flux2Constants k;
  k.mod_img = mod_img_(act);
  k.mod_txt = mod_txt_(act);
  k.mod_single = mod_single_(act);
  k.mod_out = norm_out_linear_(act);
  return k;
}

Flux2Constants Flux2ShellImpl::forward(const at::Tensor& timestep, const at::Tensor& guidance,
                                       const at::Tensor& img_ids, const at::Tensor& txt_ids, at::ScalarType dtype) {
  Flux2Constants k = Modulations(timestep, guidance, dtype);
  std::tie(k.rope_cos, k.rope_sin) = Rope(img_ids, txt_ids);
  k.target_tokens = TargetTokens(img_ids);
  return k;
}

std::pair<at::Tensor, at::Tensor> Flux2ShellImpl::Rope(const at::Tensor& img_ids, const at::Tensor& txt_ids) {
  auto [img_cos, img_sin] = RopeTables(img_ids.to(device()), config_.axes_dims_rope, config_.rope_theta);
  auto [txt_cos, txt_sin] = RopeTables(txt_ids.to(device()), config_.axes_dims_rope, config_.rope_theta);
  return {at::cat({txt_cos, img_cos}, 0), at::cat({txt_sin, img_sin}, 0)};
}

Flux2StageImpl::Flux2StageImpl(const Flux2Config& c, const Flux2StageRange& range, const at::TensorOptions& options)
    : config_(c), range_(range) {
  TORCH_CHECK(range.block_begin >= 0 && range.block_begin <= range.block_end && range.block_end <= c.num_blocks(),
              "bad block range [", range.block_begin, ", ", range.block_end, ") for a model with ", c.num_blocks(),
              " blocks");
  const int64_t d = c.inner_dim();
  if (range.has_embedders) {
    x_embedder_ = register_module("x_embedder", LoraLinear(c.in_channels, d, options));
    context_embedder_ = register_module("context_embedder", LoraLinear(c.joint_attention_dim, d, options));
  }
  for (int64_t i = range.block_begin; i < range.block_end; ++i) {
    if (c.IsDoubleBlock(i)) {
      double_blocks_.push_back(
          RegisterAt(*this, {"transformer_blocks", std::to_string(i)}, Flux2TransformerBlock(c, options)));
    } else {
      single_blocks_.push_back(RegisterAt(*this, {"single_transformer_blocks", std::to_string(i - c.num_layers)},
                                          Flux2SingleTransformerBlock(c, options)));
    }
  }
  if (range.has_head) proj_out_ = register_module("proj_out", LoraLinear(d, c.out_dim(), options));
}

std::vector<std::function<Flux2Activations(const Flux2Activations&)>> Flux2StageImpl::Pieces(const Flux2Constants& k) {
  std::vector<std::function<Flux2Activations(const Flux2Activations&)>> pieces;
  if (range_.has_embedders) {
    pieces.push_back([this](const Flux2Activations& in) {
      Flux2Activations a = in;
      a.img = x_embedder_(in.img);
      a.txt = context_embedder_(in.txt);
      a.txt_len = in.txt.size(1);
      return a;
    });
  }
  using Piece = std::function<Flux2Activations(const Flux2Activations&)>;
  size_t block_index = 0;  // the block's place in the range, as BlockModules lists them
  auto block_piece = [&](Piece piece) { return SwappedPiece(swap_, block_index++, std::move(piece)); };
  for (auto& block : double_blocks_) {
    pieces.push_back(block_piece([&block, &k](const Flux2Activations& in) {
      Flux2Activations a = in;
      std::tie(a.img, a.txt) = block(in.img, in.txt, k.mod_img, k.mod_txt, k.rope_cos, k.rope_sin);
      return a;
    }));
  }
  // The join happens on the stage holding single block 0; a stage starting after it receives `joint`.
  const bool joins = !single_blocks_.empty() && range_.block_begin <= config_.num_layers;
  if (joins) {
    pieces.push_back([](const Flux2Activations& in) {
      Flux2Activations a = in;
      a.txt_len = in.txt.size(1);
      a.joint = at::cat({in.txt, in.img}, 1);
      a.img = at::Tensor();
      a.txt = at::Tensor();
      return a;
    });
  }
  for (auto& block : single_blocks_) {
    pieces.push_back(block_piece([&block, &k](const Flux2Activations& in) {
      Flux2Activations a = in;
      a.joint = block(in.joint, k.mod_single, k.rope_cos, k.rope_sin);
      return a;
    }));
  }
  if (range_.has_head) {
    pieces.push_back([this, &k](const Flux2Activations& in) {
      Flux2Activations a = in;
      at::Tensor x = in.joint.defined() ? in.joint.narrow(1, in.txt_len, in.joint.size(1) - in.txt_len) : in.img;
      // Reference tokens condition every block but are not predicted (norm_out is per token: slicing first is the
      // same as slicing the output).
      if (k.target_tokens > 0) x = x.narrow(1, 0, k.target_tokens);
      auto scale_shift = k.mod_out.chunk(2, -1);  // diffusers' AdaLayerNormContinuous order: (scale, shift)
      x = ModulatedLayerNorm(x, scale_shift[0].unsqueeze(1), scale_shift[1].unsqueeze(1), config_.eps);
      a.output = proj_out_(x);
      a.img = a.txt = a.joint = at::Tensor();
      return a;
    });
  }
  return pieces;
}

std::vector<torch::nn::Module*> Flux2StageImpl::BlockModules() {
  std::vector<torch::nn::Module*> out;
  for (auto& block : double_blocks_) out.push_back(block.get());
  for (auto& block : single_blocks_) out.push_back(block.get());
  return out;
}

Flux2Activations Flux2StageImpl::forward(const Flux2Activations& in, const Flux2Constants& k) {
  CheckNoGraphThroughSwappedBlocks(swap_.get());
  Flux2Activations a = in;
  for (const auto& piece : Pieces(k)) a = piece(a);
  return a;
}

namespace {

// Detached copies of the live tensors; floating ones require grad so the recomputed piece reports
// gradients for them.
Flux2Activations DetachedActivationLeaves(const Flux2Activations& a) {
  Flux2Activations out = a;
  for (at::Tensor* t : {&out.img, &out.txt, &out.joint, &out.output}) {
    if (t->defined()) *t = t->detach().requires_grad_(t->is_floating_point());
  }
  return out;
}

}  // namespace

size_t Flux2StageImpl::CheckpointedPieces(int64_t recompute_blocks, size_t pieces) const {
  const int64_t nd = static_cast<int64_t>(double_blocks_.size());
  const int64_t n = nd + static_cast<int64_t>(single_blocks_.size());
  if (recompute_blocks < 0 || recompute_blocks >= n) return pieces;
  if (recompute_blocks == 0) return 0;
  // Pieces: [embedders], double blocks, [join], single blocks, [head] (see Pieces).
  const bool joins = !single_blocks_.empty() && range_.block_begin <= config_.num_layers;
  const int64_t k = recompute_blocks;
  return static_cast<size_t>((range_.has_embedders ? 1 : 0) + k + (k > nd && joins ? 1 : 0));
}

Flux2Activations Flux2StageImpl::ForwardCheckpointed(const Flux2Activations& in, const Flux2Constants& k,
                                                     std::vector<Flux2Activations>* checkpoints,
                                                     int64_t recompute_blocks) {
  CheckSwappedBlocksRecomputed(swap_.get(), recompute_blocks,
                               static_cast<int64_t>(double_blocks_.size() + single_blocks_.size()));
  const auto pieces = Pieces(k);
  return ForwardChainCheckpointed(pieces, CheckpointedPieces(recompute_blocks, pieces.size()), in, checkpoints,
                                  DetachedActivationLeaves);
}

void Flux2StageImpl::BackwardFromCheckpoints(std::vector<Flux2Activations> checkpoints, const Flux2Constants& k,
                                             const BackwardSeed& seed, int64_t recompute_blocks) {
  const auto pieces = Pieces(k);
  BackwardChainFromCheckpoints(pieces, CheckpointedPieces(recompute_blocks, pieces.size()), std::move(checkpoints),
                               seed, [](const Flux2Activations& a) { return a.Live(); });
}

std::vector<std::pair<std::string, std::vector<int64_t>>> Flux2ParameterShapes(const Flux2Config& c) {
  auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kFloat);
  Flux2Shell shell(c, meta);
  Flux2Stage stage(c, Flux2StageRange::Full(c), meta);
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (torch::nn::Module* m :
       {static_cast<torch::nn::Module*>(shell.get()), static_cast<torch::nn::Module*>(stage.get())}) {
    for (const auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value().sizes().vec());
  }
  return out;
}

at::Tensor Flux2Forward(Flux2Shell& shell, Flux2Stage& stage, const at::Tensor& hidden_states,
                        const at::Tensor& encoder_hidden_states, const at::Tensor& timestep, const at::Tensor& guidance,
                        const at::Tensor& img_ids, const at::Tensor& txt_ids) {
  Flux2Constants k = shell(timestep, guidance, img_ids, txt_ids, hidden_states.scalar_type());
  Flux2Activations in;
  in.img = hidden_states;
  in.txt = encoder_hidden_states;
  return stage(in, k).output;
}

}  // namespace baton
