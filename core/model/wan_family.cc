#include "core/model/wan_family.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/lora/lora.h"
#include "core/lora/original_adapters.h"
#include "core/lora/wan_lora_names.h"
#include "core/model/quantize_module.h"
#include "core/model/stage_build.h"
#include "core/model/wan_i2v.h"
#include "core/model/wan_model.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

const std::vector<std::string>& AttentionTargets() {
  static const auto* t = new std::vector<std::string>{
      "attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
      "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0",
  };
  return *t;
}

// in/out features of a block Linear named by its target suffix, or {0, 0} when the config has none.
std::pair<int64_t, int64_t> TargetShape(const WanConfig& c, const std::string& target) {
  const int64_t d = c.inner_dim();
  if (absl::StartsWith(target, "attn1.") || absl::StartsWith(target, "attn2.to_")) return {d, d};
  if (target == "ffn.net.0.proj") return {d, c.ffn_dim};
  if (target == "ffn.net.2") return {c.ffn_dim, d};
  if (target == "attn2.add_k_proj" || target == "attn2.add_v_proj") return {c.added_kv_proj_dim, d};
  return {0, 0};
}

absl::Status Expect(const TensorMap& m, const std::string& name, int64_t dim, const char* what) {
  auto it = m.find(name);
  if (it == m.end() || !it->second.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("Wan ", what, ": missing '", name, "'"));
  }
  if (dim >= 0 && it->second.dim() != dim) {
    return absl::InvalidArgumentError(absl::StrCat("Wan ", what, ": '", name, "' has rank ", it->second.dim(), " [",
                                                   ShapeString(it->second.sizes()), "], expected ", dim));
  }
  return absl::OkStatus();
}

// A TARGET's optional "loss_mask" (WanFamily::LossMask: TI2V's clean first frame [B, 1, F, 1, 1], the records' masks
// [B, 1, 1, H, W], or both [B, 1, F, H, W]): floating, beside "target", nothing else.
absl::Status CheckLossMask(const TensorMap& t) {
  const at::Tensor& target = t.at("target");
  auto it = t.find("loss_mask");
  if (t.size() != (it == t.end() ? 1u : 2u)) {
    return absl::InvalidArgumentError("Wan target: expected 'target' and at most 'loss_mask'");
  }
  if (it == t.end()) return absl::OkStatus();
  const at::Tensor& m = it->second;
  auto fits = [&](int d) { return m.size(d) == 1 || m.size(d) == target.size(d); };
  if (m.dim() != 5 || !m.is_floating_point() || m.size(0) != target.size(0) || m.size(1) != 1 || !fits(2) || !fits(3) ||
      !fits(4)) {
    return absl::InvalidArgumentError(absl::StrCat("Wan target: loss_mask ", ShapeString(m.sizes()), ", expected [",
                                                   target.size(0), ", 1, ", target.size(2), " or 1, ", target.size(3),
                                                   " or 1, ", target.size(4), " or 1] floating"));
  }
  return absl::OkStatus();
}

// The family interface owns stages and shells through unique_ptr; torch modules live in shared_ptrs.
class OwnedWanStage : public StageModel {
 public:
  explicit OwnedWanStage(WanStage stage) : stage_(std::move(stage)) {}
  torch::nn::Module& module() override { return *stage_; }
  const StageRange& range() const override { return stage_->range(); }
  TensorMap Forward(const TensorMap& in, const TensorMap& constants) override { return stage_->Forward(in, constants); }
  TensorMap ForwardCheckpointed(const TensorMap& in, const TensorMap& constants, std::vector<TensorMap>* checkpoints,
                                int64_t recompute_blocks) override {
    return stage_->ForwardCheckpointed(in, constants, checkpoints, recompute_blocks);
  }
  void BackwardFromCheckpoints(std::vector<TensorMap> checkpoints, const TensorMap& constants, const BackwardSeed& seed,
                               int64_t recompute_blocks) override {
    stage_->BackwardFromCheckpoints(std::move(checkpoints), constants, seed, recompute_blocks);
  }
  std::vector<torch::nn::Module*> BlockModules() override { return stage_->BlockModules(); }
  void UseBlockSwap(std::shared_ptr<BlockSwap> swap) override { stage_->UseBlockSwap(std::move(swap)); }

 private:
  WanStage stage_;
};

class OwnedWanShell : public ShellModel {
 public:
  explicit OwnedWanShell(WanShell shell) : shell_(std::move(shell)) {}
  absl::StatusOr<ShellOutputs> Run(const TensorMap& model_inputs, at::ScalarType dtype) override {
    at::NoGradGuard no_grad;  // the shell is frozen
    return shell_->Run(model_inputs, dtype);
  }

 private:
  WanShell shell_;
};

}  // namespace

std::string WanFamily::config_json() const { return WanConfigToJson(config_); }
int64_t WanFamily::num_blocks() const { return config_.num_layers; }
int64_t WanFamily::hidden_size() const { return config_.inner_dim(); }

// The video part of a micro-batch's tokens (the embedders and the head see no text).
static double VideoTokens(const PlanShape& shape) {
  return static_cast<double>(std::max<int64_t>(0, shape.tokens - shape.text_tokens));
}

namespace {

// The image-context tokens each block's image branch reads: CLIP ViT-H/14's 257 per image (FLF2V: two images, its
// pos_embed_seq_len), none without the branch.
int64_t WanImageTokens(const WanConfig& c) {
  if (!c.has_image_branch()) return 0;
  return c.pos_embed_seq_len > 0 ? c.pos_embed_seq_len : 257;
}

}  // namespace

BlockPlanInfo WanFamily::Block(int64_t global_index, const PlanShape& shape) const {
  const WanConfig& c = config_;
  const double d = static_cast<double>(c.inner_dim());
  const double tokens = static_cast<double>(std::max<int64_t>(shape.tokens, 1));
  const double text = static_cast<double>(shape.text_tokens), video = std::max(0.0, tokens - text);
  BlockPlanInfo b;
  b.kind = "block";
  b.kind_index = global_index;
  b.params = c.BlockParams();
  b.linear_params = c.BlockLinearParams();
  for (const std::string& t : shape.lora_targets) {
    auto [in, out] = TargetShape(c, t);
    b.lora_params += AdapterParameterCount(shape.lora_type, in, out, shape.lora_rank, shape.lokr_factor);
    b.adapted_elements += in * out;
    b.largest_adapted = std::max(b.largest_adapted, in * out);
    // Cross-attention keys and values read the text; every other linear the video tokens.
    const bool reads_text = t == "attn2.to_k" || t == "attn2.to_v" || absl::StartsWith(t, "attn2.add_");
    b.lora_input_elements += in * static_cast<int64_t>(reads_text ? text : video);
  }
  b.largest_linear_params = c.inner_dim() * c.ffn_dim;  // ffn.net.0.proj and ffn.net.2
  // Video tokens: self-attention q/k/v/out, cross q/out, FFN; text tokens: cross k/v (per block, as upstream); Wan 2.1
  // I2V's CLIP tokens: add_k/add_v and a second cross-attention over them.
  const double image = static_cast<double>(WanImageTokens(c));
  const double video_macs = video * (6 * d * d + 2 * d * static_cast<double>(c.ffn_dim));
  b.macs_per_token = (video_macs + (text + image) * 2 * d * d) / tokens;
  b.attention_macs = 2 * video * video * d + 2 * video * (text + image) * d;
  return b;
}

BlockPlanInfo WanFamily::Embedders(const PlanShape& shape) const {
  const WanConfig& c = config_;
  BlockPlanInfo b;
  b.kind = "embedders";
  b.params = c.EmbedderParams();
  b.linear_params = 0;  // the patch Conv3d stays in the compute dtype
  b.extra_macs = VideoTokens(shape) * static_cast<double>(c.in_channels * c.patch_volume() * c.inner_dim());
  return b;
}

BlockPlanInfo WanFamily::Head(const PlanShape& shape) const {
  const WanConfig& c = config_;
  BlockPlanInfo b;
  b.kind = "head";
  b.params = c.HeadParams();
  b.extra_macs = VideoTokens(shape) * static_cast<double>(c.inner_dim() * c.out_dim() * c.patch_volume());
  return b;
}

std::string WanFamily::DescribeBlocks(int64_t begin, int64_t end) const {
  if (end <= begin) return "no blocks";
  return end - begin == 1 ? absl::StrCat("block ", begin) : absl::StrCat("block ", begin, "-", end - 1);
}

absl::StatusOr<std::unique_ptr<StageModel>> WanFamily::BuildStage(const StageRange& range, at::ScalarType dtype,
                                                                  at::Device device, const LoraSpec* lora, bool train,
                                                                  WeightQuant quant,
                                                                  const FrozenTensors* shared) const {
  if (range.block_begin < 0 || range.block_begin > range.block_end || range.block_end > num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("Wan stage: bad block range [", range.block_begin, ", ",
                                                   range.block_end, ") for ", num_blocks(), " blocks"));
  }
  if (!checkpoint_) return absl::FailedPreconditionError("a config-only Wan model builds no stage (no weights)");
  WanStage stage{nullptr};
  StageBuild build;
  build.construct = [&](const at::TensorOptions& options) {
    stage = WanStage(config_, range, options);
    return stage.ptr();
  };
  // 8-bit block linears (`quantize`), filled one tensor at a time from the full-precision checkpoint, as FLUX.2's are;
  // LoadWanWeights reads the rest (a quantized weight is a buffer, not a parameter).
  build.quantized = [](const std::string& weight_name) {
    return absl::StartsWith(weight_name, "blocks.") && !absl::StrContains(weight_name, "norm");
  };
  build.load = [&](torch::nn::Module& module) {
    RETURN_IF_ERROR(LoadWanWeights(module, *checkpoint_));
    if (quant == WeightQuant::kNone) return absl::OkStatus();
    WeightSource source;
    source.path = checkpoint_->path();
    source.shape = [this](const std::string& key) { return checkpoint_->Shape(key); };
    source.load_fp32 = [this](const std::string& key) { return checkpoint_->Load(key, at::kFloat); };
    return LoadQuantizedWeights(module, source);
  };
  RETURN_IF_ERROR(BuildStageModule(build, "the Wan stage", dtype, device, quant, lora, train, shared));
  return std::unique_ptr<StageModel>(new OwnedWanStage(stage));
}

absl::StatusOr<std::unique_ptr<ShellModel>> WanFamily::BuildShell(at::ScalarType dtype, at::Device device) const {
  WanShell shell{nullptr};
  RETURN_IF_ERROR(TorchCall("building the Wan shell",
                            [&] { shell = WanShell(config_, at::TensorOptions().dtype(dtype).device(device)); }));
  if (!checkpoint_) return absl::FailedPreconditionError("a config-only Wan model builds no shell (no weights)");
  RETURN_IF_ERROR(LoadWanWeights(*shell, *checkpoint_));
  shell->eval();
  return std::unique_ptr<ShellModel>(new OwnedWanShell(shell));
}

absl::Status WanFamily::CheckWire(WireKind kind, const TensorMap& tensors, at::ScalarType dtype) const {
  if (kind == WireKind::kTarget && tensors.count(kLossWeightingName)) {
    ASSIGN_OR_RETURN(TensorMap rest, WithoutLossWeighting(tensors));
    return CheckWire(kind, rest, dtype);
  }
  const WanConfig& c = config_;
  switch (kind) {
    case WireKind::kInputs:
      RETURN_IF_ERROR(Expect(tensors, "hidden_states", 5, "inputs"));
      if (tensors.at("hidden_states").size(1) != c.in_channels) {
        return absl::InvalidArgumentError(absl::StrCat("Wan inputs: hidden_states has ",
                                                       tensors.at("hidden_states").size(1), " channels, the model ",
                                                       c.in_channels));
      }
      break;
    case WireKind::kConstants:
      RETURN_IF_ERROR(Expect(tensors, "temb", -1, "constants"));
      RETURN_IF_ERROR(Expect(tensors, "timestep_proj", -1, "constants"));
      RETURN_IF_ERROR(Expect(tensors, "context", 3, "constants"));
      RETURN_IF_ERROR(Expect(tensors, "grid", 1, "constants"));
      if (tensors.at("context").size(2) != c.inner_dim()) {
        return absl::InvalidArgumentError(absl::StrCat("Wan constants: context width ", tensors.at("context").size(2),
                                                       " != hidden size ", c.inner_dim()));
      }
      if (tensors.at("temb").size(0) != tensors.at("context").size(0) ||
          tensors.at("timestep_proj").size(0) != tensors.at("context").size(0)) {
        return absl::InvalidArgumentError("Wan constants: temb, timestep_proj and context disagree on the batch");
      }
      break;
    case WireKind::kTables:
      RETURN_IF_ERROR(Expect(tensors, "rope_cos", 2, "tables"));
      RETURN_IF_ERROR(Expect(tensors, "rope_sin", 2, "tables"));
      if (tensors.at("rope_cos").size(1) != c.attention_head_dim) {
        return absl::InvalidArgumentError("Wan tables: rope_cos width is not the head dim");
      }
      break;
    case WireKind::kActivation:
      RETURN_IF_ERROR(Expect(tensors, "x", 3, "activation"));
      if (tensors.at("x").size(2) != c.inner_dim() || tensors.at("x").scalar_type() != dtype) {
        return absl::InvalidArgumentError(absl::StrCat("Wan activation: x ", ShapeString(tensors.at("x").sizes()), " ",
                                                       c10::toString(tensors.at("x").scalar_type()),
                                                       ", expected [B, S, ", c.inner_dim(), "] ",
                                                       c10::toString(dtype)));
      }
      break;
    case WireKind::kTarget:
      RETURN_IF_ERROR(Expect(tensors, "target", 5, "target"));
      if (tensors.at("target").size(1) != c.out_dim()) {
        return absl::InvalidArgumentError(absl::StrCat("Wan target: ", ShapeString(tensors.at("target").sizes()),
                                                       ", expected [B, ", c.out_dim(), ", F, H, W]"));
      }
      return CheckLossMask(tensors);
    case WireKind::kGradient:  // answers an activation: x, floating
      RETURN_IF_ERROR(Expect(tensors, "x", 3, "gradient"));
      if (tensors.size() != 1 || tensors.at("x").size(2) != c.inner_dim() || !tensors.at("x").is_floating_point()) {
        return absl::InvalidArgumentError(absl::StrCat("Wan gradient: expected only 'x', floating [B, S, ",
                                                       c.inner_dim(), "], got ", ShapeString(tensors.at("x").sizes())));
      }
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> WanFamily::LoraTargets(const std::string& preset_or_list) const {
  std::vector<std::string> out = AttentionTargets();
  if (preset_or_list == "attention") return out;
  if (preset_or_list == "all-linear") {
    out.push_back("ffn.net.0.proj");
    out.push_back("ffn.net.2");
    if (config_.added_kv_proj_dim > 0) {
      out.push_back("attn2.add_k_proj");
      out.push_back("attn2.add_v_proj");
    }
    return out;
  }
  out.clear();
  for (absl::string_view t : absl::StrSplit(preset_or_list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(t));
  }
  if (out.empty()) return absl::InvalidArgumentError("LoRA targets: empty list");
  return out;
}

absl::StatusOr<TensorMap> WanFamily::LoraToOriginalNames(const TensorMap& peft) const {
  ASSIGN_OR_RETURN(auto adapters, AdaptersFromParameters(peft, 1.0));
  return AdaptersToOriginal(adapters, WanOriginalNaming());
}

absl::Status WanFamily::CheckOriginalNaming(const LoraSpec& spec) const { return absl::OkStatus(); }  // no fusion

// Baton's internal names are diffusers' without the "transformer." prefix.
absl::StatusOr<TensorMap> WanFamily::LoraFromOriginalNames(const TensorMap& original) const {
  ASSIGN_OR_RETURN(auto adapters, ParseWanLora(original));
  ASSIGN_OR_RETURN(TensorMap diffusers, WanLoraToDiffusersStateDict(adapters));
  TensorMap out;
  for (auto& [name, t] : diffusers) out[std::string(absl::StripPrefix(name, "transformer."))] = t;
  return out;
}

absl::Status WanFamily::CheckModelInputs(const TensorMap& model_inputs, const std::string& source) const {
  return Annotate(CheckWanModelInputs(config_, model_inputs), source);
}

int64_t WanFamily::LatentTokens(at::IntArrayRef sample_latents) const {
  const WanConfig& c = config_;
  if (sample_latents.size() != 4) return 0;  // [C, F, H, W]
  return sample_latents[1] / c.patch_size[0] * (sample_latents[2] / c.patch_size[1]) *
         (sample_latents[3] / c.patch_size[2]);
}

absl::Status WanFamily::CheckCacheFits(const CacheContents& cache) const {
  if (cache.text_dim != config_.text_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("text dim ", cache.text_dim, " vs the model's text_dim ", config_.text_dim));
  }
  return CheckWanConditioningFits(config_, cache.latent_channels, cache.conditioning, cache.condition_channels,
                                  cache.image_dim);
}

// The sampler's t is the flow-matching sigma in (0, 1]; diffusers' Wan takes the scheduler's timestep, 1000·sigma
// (FlowMatchEulerDiscreteScheduler's num_train_timesteps). Image-to-video batches add their conditioning as
// WanImageToVideoPipeline.__call__ does (core/model/wan_i2v.h).
absl::StatusOr<TensorMap> WanFamily::MicroBatchInputs(const NoisyBatch& batch) const {
  const WanConfig& c = config_;
  if (batch.noisy.dim() != 5 || batch.noisy.size(1) != c.out_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("Wan latents are ", ShapeString(batch.noisy.sizes()),
                                                   ", expected [b, ", c.out_dim(), ", F, H, W]"));
  }
  if (batch.references.defined()) {
    return absl::InvalidArgumentError(
        "reference images are FLUX.2's (editing); Wan takes a first frame instead (image-to-video)");
  }
  TensorMap in{{"hidden_states", batch.noisy},
               {"timestep", batch.timestep * 1000.0},
               {"encoder_hidden_states", batch.prompt_embeds}};
  if (batch.conditioning.empty()) return in;
  ASSIGN_OR_RETURN(in["hidden_states"], WanConditionedInput(batch.conditioning, batch.noisy, batch.condition));
  if (batch.conditioning == kWanCleanFirstFrame) {
    in["timestep"] =
        WanExpandedTimesteps(c, batch.timestep * 1000.0, batch.noisy.size(2), batch.noisy.size(3), batch.noisy.size(4));
  }
  if (batch.image_embeds.defined()) in["encoder_hidden_states_image"] = batch.image_embeds;
  return in;
}

at::Tensor WanFamily::LossMask(const NoisyBatch& batch) const {
  at::Tensor mask;
  if (batch.conditioning == kWanCleanFirstFrame) mask = WanFirstFrameLossMask(batch.noisy.size(0), batch.noisy.size(2));
  if (!batch.loss_weights.defined()) return mask;
  at::Tensor weights = batch.loss_weights.unsqueeze(1).unsqueeze(1);  // [b, 1, 1, H, W]: every frame alike
  return mask.defined() ? mask * weights : weights;
}

bool IsWanModel(const std::string& path, const std::string& config_path) {
  std::vector<std::string> candidates;
  if (!config_path.empty()) {
    candidates.push_back(config_path);
  } else {
    for (const char* sub : {"config.json", "transformer/config.json", "high_noise_model/config.json"}) {
      candidates.push_back(JoinPath(path, sub));
    }
  }
  for (const std::string& cfg : candidates) {
    if (!PathExists(cfg)) continue;
    auto text = ReadFileBounded(cfg, uint64_t{1} << 20);
    if (!text.ok()) return false;
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return false;
    const std::string cls = j.value("_class_name", std::string());
    return cls == "WanTransformer3DModel" || cls == "WanModel";
  }
  return false;
}

absl::StatusOr<std::unique_ptr<ModelFamily>> WanFamily::Open(const std::string& path, const std::string& config_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<WanFamily> model, OpenWanModel(path, config_path));
  return std::unique_ptr<ModelFamily>(std::move(model));
}

absl::StatusOr<std::unique_ptr<WanFamily>> OpenWanModel(const std::string& path, const std::string& config_path,
                                                        WanExpert expert) {
  ASSIGN_OR_RETURN(auto ckpt, WanCheckpoint::Open(path, config_path, expert));
  return std::make_unique<WanFamily>(std::move(ckpt));
}

}  // namespace baton
