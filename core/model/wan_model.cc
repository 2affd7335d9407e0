#include "core/model/wan_model.h"

#include <absl/strings/str_cat.h>

#include "core/model/block_swap.h"
#include "core/model/checkpointed_pieces.h"
#include "core/model/flux2_ops.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {
namespace {

// FP32LayerNorm's default eps in diffusers' WanImageEmbedding (nn.LayerNorm's).
constexpr double kImageNormEps = 1e-5;

const at::Tensor& Need(const TensorMap& m, const char* name) {
  auto it = m.find(name);
  TORCH_CHECK(it != m.end() && it->second.defined(), "Wan stage: missing tensor '", name, "'");
  return it->second;
}

}  // namespace

std::string WanTablesKey(int64_t f, int64_t h, int64_t w) { return absl::StrCat("wan_rope:", f, "x", h, "x", w); }

std::pair<at::Tensor, at::Tensor> WanRopeTables(const WanConfig& c, int64_t f, int64_t h, int64_t w,
                                                at::Device device) {
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor ff = at::arange(f, i64).view({f, 1, 1}).expand({f, h, w});
  at::Tensor hh = at::arange(h, i64).view({1, h, 1}).expand({f, h, w});
  at::Tensor ww = at::arange(w, i64).view({1, 1, w}).expand({f, h, w});
  at::Tensor ids = at::stack({ff.reshape(-1), hh.reshape(-1), ww.reshape(-1)}, 1);
  return RopeTables(ids, {c.rope_t_dim(), c.rope_h_dim(), c.rope_h_dim()}, 10000.0);
}

WanShellImpl::WanShellImpl(const WanConfig& c, const at::TensorOptions& options) : config_(c) {
  const int64_t d = c.inner_dim();
  const auto f32 = options.dtype(at::kFloat);  // time_embedder is in _keep_in_fp32_modules
  time_1_ = WanLinear(*this, {"condition_embedder", "time_embedder", "linear_1"}, c.freq_dim, d, f32);
  time_2_ = WanLinear(*this, {"condition_embedder", "time_embedder", "linear_2"}, d, d, f32);
  time_proj_ = WanLinear(*this, {"condition_embedder", "time_proj"}, d, 6 * d, options);
  text_1_ = WanLinear(*this, {"condition_embedder", "text_embedder", "linear_1"}, c.text_dim, d, options);
  text_2_ = WanLinear(*this, {"condition_embedder", "text_embedder", "linear_2"}, d, d, options);
  if (c.has_image_branch()) {
    const std::vector<std::string> base = {"condition_embedder", "image_embedder"};
    auto path = [&](std::vector<std::string> rest) {
      std::vector<std::string> p = base;
      p.insert(p.end(), rest.begin(), rest.end());
      return p;
    };
    image_norm1_ = WanLayerNorm(*this, path({"norm1"}), c.image_dim, kImageNormEps, options);
    image_ff_1_ = WanLinear(*this, path({"ff", "net", "0", "proj"}), c.image_dim, c.image_dim, options);
    image_ff_2_ = WanLinear(*this, path({"ff", "net", "2"}), c.image_dim, d, options);
    image_norm2_ = WanLayerNorm(*this, path({"norm2"}), d, kImageNormEps, options);
    if (c.pos_embed_seq_len > 0) {
      image_pos_embed_ = WanHolder(*this, base)
                             .register_parameter("pos_embed", at::empty({1, c.pos_embed_seq_len, c.image_dim}, options),
                                                 /*requires_grad=*/false);
    }
  }
}

absl::Status WanShellImpl::CheckInputs(const TensorMap& in) const { return CheckWanModelInputs(config_, in); }

absl::Status CheckWanModelInputs(const WanConfig& config_, const TensorMap& in) {
  for (const char* name : {"hidden_states", "timestep", "encoder_hidden_states"}) {
    if (!in.count(name)) return absl::InvalidArgumentError(absl::StrCat("Wan inputs: missing '", name, "'"));
  }
  const at::Tensor& hs = in.at("hidden_states");
  const at::Tensor& ehs = in.at("encoder_hidden_states");
  if (hs.dim() != 5 || hs.size(1) != config_.in_channels) {
    return absl::InvalidArgumentError(absl::StrCat("Wan inputs: hidden_states must be [B, ", config_.in_channels,
                                                   ", F, H, W], got ", ShapeString(hs.sizes())));
  }
  for (int i = 0; i < 3; ++i) {
    if (hs.size(2 + i) % config_.patch_size[i] != 0 ||
        hs.size(2 + i) / config_.patch_size[i] > config_.rope_max_seq_len) {
      return absl::InvalidArgumentError(absl::StrCat("Wan inputs: hidden_states ", ShapeString(hs.sizes()),
                                                     " is not a multiple of the patch size or exceeds "
                                                     "rope_max_seq_len ",
                                                     config_.rope_max_seq_len, " patches per axis"));
    }
  }
  if (ehs.dim() != 3 || ehs.size(0) != hs.size(0) || ehs.size(2) != config_.text_dim) {
    return absl::InvalidArgumentError(absl::StrCat("Wan inputs: encoder_hidden_states must be [B, L, ",
                                                   config_.text_dim, "], got ", ShapeString(ehs.sizes())));
  }
  const bool has_image = in.count("encoder_hidden_states_image") > 0;
  if (config_.has_image_branch() != has_image) {
    return absl::InvalidArgumentError(config_.has_image_branch()
                                          ? "Wan inputs: this model has a CLIP image branch (Wan 2.1 I2V): "
                                            "encoder_hidden_states_image is required"
                                          : "Wan inputs: encoder_hidden_states_image given, but this model has no "
                                            "image branch (image_dim is null)");
  }
  if (has_image && ehs.size(1) != 512) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Wan inputs: a model with the CLIP image branch (Wan 2.1 I2V) needs encoder_hidden_states of 512 tokens "
        "(diffusers' attention takes the last 512 context tokens as text), got ",
        ehs.size(1)));
  }
  const at::Tensor& timestep = in.at("timestep");
  const int64_t patches =
      hs.size(2) / config_.patch_size[0] * (hs.size(3) / config_.patch_size[1]) * (hs.size(4) / config_.patch_size[2]);
  if (timestep.dim() < 1 || timestep.dim() > 2 || timestep.size(0) != hs.size(0) ||
      (timestep.dim() == 2 && timestep.size(1) != patches)) {
    return absl::InvalidArgumentError(absl::StrCat("Wan inputs: timestep must be [B] or, per token, [B, ", patches,
                                                   "] (one entry per patch), got ", ShapeString(timestep.sizes())));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShellOutputs> WanShellImpl::Run(const TensorMap& in, at::ScalarType dtype) {
  RETURN_IF_ERROR(CheckInputs(in));
  const at::Tensor& hs = in.at("hidden_states");
  const int64_t f = hs.size(2) / config_.patch_size[0], h = hs.size(3) / config_.patch_size[1],
                w = hs.size(4) / config_.patch_size[2];
  at::Tensor timestep = in.at("timestep");
  if (timestep.dim() == 2 && timestep.size(1) != f * h * w) {
    return absl::InvalidArgumentError(absl::StrCat("Wan inputs: per-token timestep ", ShapeString(timestep.sizes()),
                                                   " must have one entry per patch (", f * h * w, ")"));
  }
  ShellOutputs out;
  RETURN_IF_ERROR(TorchCall("Wan shell", [&] {
    const at::Device device = time_1_.bias.device();
    at::Tensor ehs = in.at("encoder_hidden_states").to(device, dtype);
    at::Tensor t = timestep.to(device);
    const int64_t seq = t.dim() == 2 ? t.size(1) : 0;
    at::Tensor features = TimestepFeatures(t.flatten(), config_.freq_dim);  // fp32, diffusers' Timesteps
    if (seq > 0) features = features.unflatten(0, {-1, seq});
    at::Tensor temb = time_2_(at::silu(time_1_(features))).to(dtype);
    at::Tensor proj = time_proj_(at::silu(temb));
    proj = seq > 0 ? proj.unflatten(2, {6, -1}) : proj.unflatten(1, {6, -1});
    at::Tensor context = text_2_(at::gelu(text_1_(ehs), "tanh"));
    if (config_.has_image_branch()) {
      at::Tensor img = in.at("encoder_hidden_states_image").to(device, dtype);
      if (image_pos_embed_.defined()) img = img.view({-1, 2 * img.size(1), img.size(2)}) + image_pos_embed_;
      img = image_norm2_(image_ff_2_(at::gelu(image_ff_1_(image_norm1_(img)))));
      context = at::cat({img, context}, 1);
    }
    out.inputs["hidden_states"] = hs.to(device, dtype);
    out.constants["temb"] = temb;
    out.constants["timestep_proj"] = proj;
    out.constants["context"] = context;
    // Host metadata, as FLUX.2's txt_len: the head reads it to unpatchify (on a device it would cost a sync).
    out.constants["grid"] = at::tensor(std::vector<int64_t>{f, h, w}, at::kLong);
    out.tables_key = WanTablesKey(f, h, w);
    auto [cos, sin] = rope_.Get(out.tables_key, [&] { return WanRopeTables(config_, f, h, w, device); });
    out.tables["rope_cos"] = cos;
    out.tables["rope_sin"] = sin;
  }));
  return out;
}

StageRange FullWanRange(const WanConfig& c) { return {0, c.num_layers, true, true}; }

WanStageImpl::WanStageImpl(const WanConfig& c, const StageRange& range, const at::TensorOptions& options)
    : config_(c), range_(range) {
  TORCH_CHECK(range.block_begin >= 0 && range.block_begin <= range.block_end && range.block_end <= c.num_layers,
              "bad block range [", range.block_begin, ", ", range.block_end, ") for a Wan model with ", c.num_layers,
              " blocks");
  const int64_t d = c.inner_dim();
  if (range.has_embedders) {
    torch::nn::Module& pe = WanHolder(*this, {"patch_embedding"});
    const auto& p = c.patch_size;
    patch_weight_ = pe.register_parameter("weight", at::empty({d, c.in_channels, p[0], p[1], p[2]}, options), false);
    patch_bias_ = pe.register_parameter("bias", at::empty({d}, options), false);
  }
  for (int64_t i = range.block_begin; i < range.block_end; ++i) {
    blocks_.push_back(WanHolder(*this, {"blocks"}).register_module(std::to_string(i), WanTransformerBlock(c, options)));
  }
  if (range.has_head) {
    proj_out_ = WanLinear(*this, {"proj_out"}, d, c.out_dim() * c.patch_volume(), options);
    head_table_ = register_parameter("scale_shift_table", at::empty({1, 2, d}, options.dtype(at::kFloat)), false);
  }
}

at::Tensor WanStageImpl::Head(const at::Tensor& x, const TensorMap& k) {
  const at::Tensor& temb = Need(k, "temb");
  at::Tensor shift, scale;
  if (temb.dim() == 3) {  // per token (TI2V): [B, S, D]
    auto ss = (head_table_.unsqueeze(0) + temb.unsqueeze(2)).chunk(2, 2);
    shift = ss[0].squeeze(2);
    scale = ss[1].squeeze(2);
  } else {
    auto ss = (head_table_ + temb.unsqueeze(1)).chunk(2, 1);
    shift = ss[0];
    scale = ss[1];
  }
  at::Tensor y = WanModulatedNorm(x, scale, shift, config_.eps).to(x.scalar_type());
  y = proj_out_(y);
  const at::Tensor grid = Need(k, "grid").to(at::kCPU);  // int64 [3] on the host (a no-op there), else a sync
  const int64_t f = grid[0].item<int64_t>(), h = grid[1].item<int64_t>(), w = grid[2].item<int64_t>();
  const auto& p = config_.patch_size;
  y = y.reshape({x.size(0), f, h, w, p[0], p[1], p[2], -1}).permute({0, 7, 1, 4, 2, 5, 3, 6});
  return y.flatten(6, 7).flatten(4, 5).flatten(2, 3);
}

std::vector<std::function<TensorMap(const TensorMap&)>> WanStageImpl::Pieces(const TensorMap& k) {
  std::vector<std::function<TensorMap(const TensorMap&)>> pieces;
  if (range_.has_embedders) {
    pieces.push_back([this](const TensorMap& in) {
      const auto& p = config_.patch_size;
      at::Tensor x = at::conv3d(Need(in, "hidden_states"), patch_weight_, patch_bias_, {p[0], p[1], p[2]});
      return TensorMap{{"x", x.flatten(2).transpose(1, 2).contiguous()}};
    });
  }
  const at::Tensor &context = Need(k, "context"), &proj = Need(k, "timestep_proj");
  const at::Tensor &cos = Need(k, "rope_cos"), &sin = Need(k, "rope_sin");
  for (size_t b = 0; b < blocks_.size(); ++b) {
    std::function<TensorMap(const TensorMap&)> piece = [&block = blocks_[b], &context, &proj, &cos,
                                                        &sin](const TensorMap& in) {
      return TensorMap{{"x", block(Need(in, "x"), context, proj, cos, sin)}};
    };
    pieces.push_back(SwappedPiece(swap_, b, std::move(piece)));
  }
  if (range_.has_head) {
    pieces.push_back([this, &k](const TensorMap& in) { return TensorMap{{"output", Head(Need(in, "x"), k)}}; });
  }
  return pieces;
}

TensorMap WanStageImpl::Forward(const TensorMap& in, const TensorMap& constants) {
  CheckNoGraphThroughSwappedBlocks(swap_.get());
  return RunPieces(Pieces(constants), in);
}

std::vector<torch::nn::Module*> WanStageImpl::BlockModules() {
  std::vector<torch::nn::Module*> out;
  for (auto& block : blocks_) out.push_back(block.get());
  return out;
}

TensorMap WanStageImpl::ForwardCheckpointed(const TensorMap& in, const TensorMap& constants,
                                            std::vector<TensorMap>* checkpoints, int64_t recompute_blocks) {
  CheckSwappedBlocksRecomputed(swap_.get(), recompute_blocks, static_cast<int64_t>(blocks_.size()));
  const auto pieces = Pieces(constants);
  const size_t c =
      CheckpointedPieceCount(recompute_blocks, range_.has_embedders ? 1 : 0, blocks_.size(), pieces.size());
  return ForwardPiecesCheckpointed(pieces, c, in, checkpoints);
}

void WanStageImpl::BackwardFromCheckpoints(std::vector<TensorMap> checkpoints, const TensorMap& constants,
                                           const BackwardSeed& seed, int64_t recompute_blocks) {
  const auto pieces = Pieces(constants);
  const size_t c =
      CheckpointedPieceCount(recompute_blocks, range_.has_embedders ? 1 : 0, blocks_.size(), pieces.size());
  BackwardPiecesFromCheckpoints(pieces, c, std::move(checkpoints), seed);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> WanParameterShapes(const WanConfig& c) {
  auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kFloat);
  WanShell shell(c, meta);
  WanStage stage(c, FullWanRange(c), meta);
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (torch::nn::Module* m :
       {static_cast<torch::nn::Module*>(shell.get()), static_cast<torch::nn::Module*>(stage.get())}) {
    for (const auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value().sizes().vec());
  }
  return out;
}

}  // namespace baton
