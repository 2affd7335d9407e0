#include "core/model/flux2_family.h"

#include <absl/base/thread_annotations.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/synchronization/mutex.h>

#include <algorithm>
#include <map>

#include "core/keys/flux2_keys.h"
#include "core/lora/lora.h"
#include "core/model/flux2_input_checks.h"
#include "core/model/flux2_ops.h"
#include "core/model/quantize_module.h"
#include "core/model/rope_cache.h"
#include "core/model/stage_build.h"
#include "core/model/stage_io.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {
namespace {

Flux2StageRange ToFlux2Range(const StageRange& r) { return {r.block_begin, r.block_end, r.has_embedders, r.has_head}; }

// A lossless map of one Flux2Activations (checkpoints): every defined tensor and txt_len.
TensorMap CheckpointMap(const Flux2Activations& a) {
  TensorMap t{{"txt_len", at::scalar_tensor(a.txt_len, at::kLong)}};
  if (a.img.defined()) t["img"] = a.img;
  if (a.txt.defined()) t["txt"] = a.txt;
  if (a.joint.defined()) t["joint"] = a.joint;
  if (a.output.defined()) t["output"] = a.output;
  return t;
}

Flux2Activations FromCheckpointMap(const TensorMap& t) {
  Flux2Activations a;
  auto get = [&](const char* name) {
    auto it = t.find(name);
    return it == t.end() ? at::Tensor() : it->second;
  };
  a.img = get("img");
  a.txt = get("txt");
  a.joint = get("joint");
  a.output = get("output");
  a.txt_len = t.at("txt_len").item<int64_t>();
  return a;
}

Flux2Constants ConstantsFromMap(const TensorMap& k) {
  Flux2Constants c;
  c.mod_img = k.at("mod_img");
  c.mod_txt = k.at("mod_txt");
  c.mod_single = k.at("mod_single");
  c.mod_out = k.at("mod_out");
  c.rope_cos = k.at("rope_cos");
  c.rope_sin = k.at("rope_sin");
  auto target = k.find("target_tokens");
  if (target != k.end()) c.target_tokens = target->second.item<int64_t>();
  return c;
}

class Flux2StageModel : public StageModel {
 public:
  Flux2StageModel(Flux2Stage stage, at::ScalarType dtype)
      : stage_(std::move(stage)),
        dtype_(dtype),
        range_{stage_->range().block_begin, stage_->range().block_end, stage_->range().has_embedders,
               stage_->range().has_head} {}
  torch::nn::Module& module() override { return *stage_; }
  const StageRange& range() const override { return range_; }

  TensorMap Forward(const TensorMap& in, const TensorMap& constants) override {
    return Flux2ActivationMap(stage_->forward(Input(in), ConstantsFromMap(constants)), range_.has_head);
  }

  TensorMap ForwardCheckpointed(const TensorMap& in, const TensorMap& constants, std::vector<TensorMap>* checkpoints,
                                int64_t recompute_blocks) override {
    std::vector<Flux2Activations> kept;
    Flux2Activations out =
        stage_->ForwardCheckpointed(Input(in), ConstantsFromMap(constants), &kept,
                                    recompute_blocks == kAllBlocks ? Flux2StageImpl::kAllBlocks : recompute_blocks);
    for (const Flux2Activations& a : kept) checkpoints->push_back(CheckpointMap(a));
    return Flux2ActivationMap(out, range_.has_head);
  }

  void BackwardFromCheckpoints(std::vector<TensorMap> checkpoints, const TensorMap& constants, const BackwardSeed& seed,
                               int64_t recompute_blocks) override {
    std::vector<Flux2Activations> kept;
    kept.reserve(checkpoints.size());
    for (const TensorMap& t : checkpoints) kept.push_back(FromCheckpointMap(t));
    checkpoints.clear();
    const bool head = range_.has_head;
    stage_->BackwardFromCheckpoints(
        std::move(kept), ConstantsFromMap(constants),
        [&](const Flux2Activations& out) { return seed(Flux2ActivationMap(out, head)); },
        recompute_blocks == kAllBlocks ? Flux2StageImpl::kAllBlocks : recompute_blocks);
  }
  std::vector<torch::nn::Module*> BlockModules() override { return stage_->BlockModules(); }
  void UseBlockSwap(std::shared_ptr<BlockSwap> swap) override { stage_->UseBlockSwap(std::move(swap)); }

 private:
  // The stage input (names in the header); the first stage converts the model inputs to its compute dtype.
  Flux2Activations Input(const TensorMap& in) {
    auto a = Flux2ActivationsFromMap(in, range_.has_embedders);
    TORCH_CHECK(a.ok(), std::string(a.status().message()));
    if (range_.has_embedders) {
      a->img = a->img.to(dtype_);
      a->txt = a->txt.to(dtype_);
    }
    return *a;
  }

  Flux2Stage stage_;
  at::ScalarType dtype_;
  StageRange range_;
};

// Whether ids are exactly the position ids of a full grid / a text of that length (then the tables have a short key).
bool IsGrid(const at::Tensor& img_ids, const at::Tensor& txt_ids, int64_t* h, int64_t* w) {
  if (img_ids.dim() != 2 || img_ids.size(1) != 4 || img_ids.size(0) == 0 || txt_ids.dim() != 2) return false;
  at::Tensor ids = img_ids.to(at::kCPU, at::kLong);
  *h = ids.select(1, 1).max().item<int64_t>() + 1;
  *w = ids.select(1, 2).max().item<int64_t>() + 1;
  if (*h * *w != ids.size(0)) return false;
  return at::equal(ids, ImagePositionIds(*h, *w)) &&
         at::equal(txt_ids.to(at::kCPU, at::kLong), TextPositionIds(txt_ids.size(0)));
}

class Flux2ShellModel : public ShellModel {
 public:
  Flux2ShellModel(Flux2Shell shell, Flux2Config config) : shell_(std::move(shell)), config_(std::move(config)) {}

  absl::StatusOr<ShellOutputs> Run(const TensorMap& in, at::ScalarType dtype) override {
    for (const char* name : {"hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids"}) {
      if (!in.count(name)) return absl::InvalidArgumentError(absl::StrCat("FLUX.2 inputs: '", name, "' is missing"));
    }
    if (config_.guidance_embeds && !in.count("guidance")) {
      return absl::InvalidArgumentError("FLUX.2 inputs: 'guidance' is missing (this model has a guidance embedder)");
    }
    ShellOutputs out;
    auto unbatched = [](const at::Tensor& ids) { return ids.dim() == 3 ? ids[0] : ids; };  // as diffusers
    const at::Tensor img_ids = unbatched(in.at("img_ids"));
    const at::Tensor txt_ids = unbatched(in.at("txt_ids"));
    Flux2Constants k;
    RETURN_IF_ERROR(TorchCall("computing the shell", [&] {
      at::NoGradGuard no_grad;
      auto guidance = in.find("guidance");
      const bool use_guidance = config_.guidance_embeds && guidance != in.end();
      k = shell_->Modulations(in.at("timestep"), use_guidance ? guidance->second : at::Tensor(), dtype);
      k.target_tokens = TargetTokens(img_ids);
      int64_t h = 0, w = 0;
      // A training grid gets the short key the stages' caches are sized for; any other ids a key of their values
      // (the shell's own cache keys on the values themselves: a hash may collide).
      std::string exact_key;
      if (IsGrid(img_ids, txt_ids, &h, &w)) {
        out.tables_key = exact_key = RopeKey(h, w, txt_ids.size(0));
      } else {
        exact_key = PositionIdsKey(img_ids, txt_ids);
        out.tables_key = absl::StrCat("ids", std::hash<std::string>()(exact_key), "t", txt_ids.size(0));
      }
      std::tie(k.rope_cos, k.rope_sin) = rope_.Get(exact_key, [&] { return shell_->Rope(img_ids, txt_ids); });
    }));
    const at::Device device = shell_->device();
    out.inputs = {{"hidden_states", in.at("hidden_states").to(device)},
                  {"encoder_hidden_states", in.at("encoder_hidden_states").to(device)}};
    out.constants = {
        {"mod_img", k.mod_img}, {"mod_txt", k.mod_txt}, {"mod_single", k.mod_single}, {"mod_out", k.mod_out}};
    if (k.target_tokens > 0) out.constants["target_tokens"] = at::scalar_tensor(k.target_tokens, at::kLong);
    out.tables = {{"rope_cos", k.rope_cos}, {"rope_sin", k.rope_sin}};
    return out;
  }

 private:
  Flux2Shell shell_;
  Flux2Config config_;
  RopeTableCache rope_;
};

// Frozen parameter shapes by piece, from a meta-device model (no memory): computed once per config.
struct Flux2Pieces {
  int64_t double_params = 0, double_linear = 0, single_params = 0, single_linear = 0;
  int64_t embed_params = 0, embed_linear = 0, head_params = 0, head_linear = 0;
  std::vector<std::pair<std::string, std::vector<int64_t>>> double_linears, single_linears, embed_linears, head_linears;
};

Flux2Pieces SizePieces(const Flux2Config& c) {
  Flux2Pieces p;
  const std::string first_double = "transformer_blocks.0.", first_single = "single_transformer_blocks.0.";
  for (const auto& named_shape : Flux2ParameterShapes(c)) {
    // Plain references, not a structured binding: the lambda below captures them (C++20 allows it, clang 14 not).
    const std::string& name = named_shape.first;
    const std::vector<int64_t>& shape = named_shape.second;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    const bool linear = shape.size() == 2 && absl::EndsWith(name, ".weight");
    auto add = [&](int64_t& params, int64_t& lin, auto& linears) {
      params += n;
      if (linear) {
        lin += n;
        linears.emplace_back(name.substr(0, name.size() - strlen(".weight")), shape);
      }
    };
    if (absl::StartsWith(name, first_double)) {
      add(p.double_params, p.double_linear, p.double_linears);
    } else if (absl::StartsWith(name, first_single)) {
      add(p.single_params, p.single_linear, p.single_linears);
    } else if (absl::StartsWith(name, "x_embedder.") || absl::StartsWith(name, "context_embedder.")) {
      add(p.embed_params, p.embed_linear, p.embed_linears);
    } else if (absl::StartsWith(name, "proj_out.")) {
      add(p.head_params, p.head_linear, p.head_linears);
    }
  }
  return p;
}

// The adapted linears' out x in elements (their sum and the largest) into `b`.
void AddAdaptedElements(const std::vector<std::pair<std::string, std::vector<int64_t>>>& linears,
                        const PlanShape& shape, BlockPlanInfo& b) {
  for (const auto& [module, s] : linears) {
    if (!LoraTargetMatches(module, shape.lora_targets)) continue;
    b.adapted_elements += s[0] * s[1];
    b.largest_adapted = std::max(b.largest_adapted, s[0] * s[1]);
  }
}

int64_t LoraParams(const std::vector<std::pair<std::string, std::vector<int64_t>>>& linears, const PlanShape& shape) {
  int64_t total = 0;
  for (const auto& [module, s] : linears) {
    if (!LoraTargetMatches(module, shape.lora_targets)) continue;
    total += AdapterParameterCount(shape.lora_type, s[1], s[0], shape.lora_rank, shape.lokr_factor);  // s: [out, in]
  }
  return total;
}

const Flux2Pieces& Pieces(const Flux2Config& c) {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  static std::map<std::string, Flux2Pieces> cache ABSL_GUARDED_BY(mu);
  absl::MutexLock lock(&mu);
  const std::string key = Flux2ConfigToJson(c);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, SizePieces(c)).first;
  return it->second;
}

}  // namespace

TensorMap Flux2ActivationMap(const Flux2Activations& a, bool has_head) {
  if (has_head) return {{"output", a.output}};
  return ActivationTensors(a);
}

absl::StatusOr<Flux2Activations> Flux2ActivationsFromMap(const TensorMap& t, bool first_stage) {
  Flux2Activations a;
  auto get = [&](const char* name) -> absl::StatusOr<at::Tensor> {
    auto it = t.find(name);
    if (it == t.end()) return absl::InvalidArgumentError(absl::StrCat("FLUX.2 stage input: '", name, "' is missing"));
    return it->second;
  };
  if (first_stage) {
    ASSIGN_OR_RETURN(a.img, get("hidden_states"));
    ASSIGN_OR_RETURN(a.txt, get("encoder_hidden_states"));
    a.txt_len = a.txt.size(1);
  } else if (t.count("joint")) {
    ASSIGN_OR_RETURN(a.joint, get("joint"));
    ASSIGN_OR_RETURN(at::Tensor len, get("txt_len"));
    a.txt_len = len.item<int64_t>();
  } else {
    ASSIGN_OR_RETURN(a.img, get("img"));
    ASSIGN_OR_RETURN(a.txt, get("txt"));
    a.txt_len = a.txt.size(1);
  }
  return a;
}

std::unique_ptr<StageModel> WrapFlux2Stage(Flux2Stage stage, at::ScalarType dtype) {
  return std::make_unique<Flux2StageModel>(std::move(stage), dtype);
}

std::unique_ptr<ShellModel> WrapFlux2Shell(Flux2Shell shell, const Flux2Config& config) {
  return std::make_unique<Flux2ShellModel>(std::move(shell), config);
}

absl::StatusOr<Flux2Stage> BuildFlux2Stage(const Flux2Checkpoint& checkpoint, const Flux2StageRange& range,
                                           at::ScalarType dtype, at::Device device, const LoraSpec* lora, bool train,
                                           WeightQuant quant, const FrozenTensors* shared) {
  ASSIGN_OR_RETURN(const WeightQuant storage, ResolveWeightQuant(quant, checkpoint));
  Flux2Stage stage{nullptr};
  StageBuild build;
  build.construct = [&](const at::TensorOptions& options) {
    stage = Flux2Stage(checkpoint.config(), range, options);
    return stage.ptr();
  };
  build.quantized = [](const std::string& weight_name) { return IsQuantizedFlux2Param(weight_name, {0, 0}); };
  build.load = [&](torch::nn::Module& module) {
    RETURN_IF_ERROR(LoadFlux2Weights(module, checkpoint));  // the rest: norms, embedders, head
    return LoadQuantizedFlux2Weights(module, checkpoint);
  };
  RETURN_IF_ERROR(BuildStageModule(build, "the FLUX.2 stage", dtype, device, storage, lora, train, shared));
  return stage;
}

absl::StatusOr<Flux2Shell> BuildFlux2Shell(const Flux2Checkpoint& checkpoint, at::ScalarType dtype, at::Device device) {
  Flux2Shell shell{nullptr};
  RETURN_IF_ERROR(TorchCall("building the shell", [&] {
    shell = Flux2Shell(checkpoint.config(), at::TensorOptions().dtype(dtype).device(device));
  }));
  RETURN_IF_ERROR(LoadFlux2Weights(*shell, checkpoint));
  shell->eval();
  return shell;
}

Flux2Family::Flux2Family(Flux2Config config, std::unique_ptr<Flux2Checkpoint> checkpoint)
    : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}

absl::StatusOr<std::unique_ptr<ModelFamily>> Flux2Family::Open(const std::string& path,
                                                               const std::string& config_path) {
  ASSIGN_OR_RETURN(auto checkpoint, Flux2Checkpoint::Open(path, config_path));
  Flux2Config config = checkpoint->config();
  return std::unique_ptr<ModelFamily>(new Flux2Family(std::move(config), std::move(checkpoint)));
}

std::string Flux2Family::config_json() const { return Flux2ConfigToJson(config_); }

std::vector<std::string> Flux2Family::WeightFiles() const {
  return checkpoint_ ? checkpoint_->FilePaths() : std::vector<std::string>{};
}

absl::StatusOr<const Flux2Checkpoint*> Flux2Family::RequireCheckpoint(const char* what) const {
  if (!checkpoint_) {
    return absl::FailedPreconditionError(absl::StrCat("FLUX.2 config without weights: cannot build ", what));
  }
  return checkpoint_.get();
}

BlockPlanInfo Flux2Family::Block(int64_t global_index, const PlanShape& shape) const {
  const Flux2Pieces& p = Pieces(config_);
  const bool dbl = config_.IsDoubleBlock(global_index);
  const double d = static_cast<double>(config_.inner_dim()), m = static_cast<double>(config_.mlp_hidden_dim());
  const double t = static_cast<double>(shape.tokens);
  BlockPlanInfo b;
  b.params = dbl ? p.double_params : p.single_params;
  b.linear_params = dbl ? p.double_linear : p.single_linear;
  b.lora_params = LoraParams(dbl ? p.double_linears : p.single_linears, shape);
  AddAdaptedElements(dbl ? p.double_linears : p.single_linears, shape, b);
  // Double and single blocks do the same linear work per token (partition.h's cost model).
  b.macs_per_token = 4 * d * d + 3 * m * d;
  b.attention_macs = 2 * t * t * d;
  b.kind = dbl ? "double" : "single";
  b.kind_index = dbl ? global_index : global_index - config_.num_layers;
  return b;
}

BlockPlanInfo Flux2Family::Embedders(const PlanShape& shape) const {
  const Flux2Pieces& p = Pieces(config_);
  const double t_txt = static_cast<double>(std::min(shape.text_tokens, shape.tokens));
  const double t_img = static_cast<double>(shape.tokens) - t_txt;
  BlockPlanInfo b;
  b.params = p.embed_params;
  b.linear_params = p.embed_linear;
  b.lora_params = LoraParams(p.embed_linears, shape);
  b.extra_macs =
      (t_img * static_cast<double>(config_.in_channels) + t_txt * static_cast<double>(config_.joint_attention_dim)) *
      static_cast<double>(config_.inner_dim());
  b.kind = "embedders";
  return b;
}

BlockPlanInfo Flux2Family::Head(const PlanShape& shape) const {
  const Flux2Pieces& p = Pieces(config_);
  const double t_img =
      static_cast<double>(shape.tokens - std::min(shape.text_tokens, shape.tokens) - shape.reference_tokens);
  BlockPlanInfo b;
  b.params = p.head_params;
  b.linear_params = p.head_linear;
  b.lora_params = LoraParams(p.head_linears, shape);
  b.extra_macs = t_img * static_cast<double>(config_.inner_dim()) * static_cast<double>(config_.out_dim());
  b.kind = "head";
  return b;
}

std::string Flux2Family::DescribeBlocks(int64_t begin, int64_t end) const {
  return baton::DescribeBlocks(config_, begin, end);
}

absl::StatusOr<std::unique_ptr<StageModel>> Flux2Family::BuildStage(const StageRange& range, at::ScalarType dtype,
                                                                    at::Device device, const LoraSpec* lora, bool train,
                                                                    WeightQuant quant,
                                                                    const FrozenTensors* shared) const {
  ASSIGN_OR_RETURN(const Flux2Checkpoint* checkpoint, RequireCheckpoint("a stage"));
  ASSIGN_OR_RETURN(Flux2Stage stage,
                   BuildFlux2Stage(*checkpoint, ToFlux2Range(range), dtype, device, lora, train, quant, shared));
  return WrapFlux2Stage(std::move(stage), dtype);
}

absl::StatusOr<std::unique_ptr<ShellModel>> Flux2Family::BuildShell(at::ScalarType dtype, at::Device device) const {
  ASSIGN_OR_RETURN(const Flux2Checkpoint* checkpoint, RequireCheckpoint("the shell"));
  ASSIGN_OR_RETURN(Flux2Shell shell, BuildFlux2Shell(*checkpoint, dtype, device));
  return WrapFlux2Shell(std::move(shell), config_);
}

absl::Status Flux2Family::CheckModelInputs(const TensorMap& model_inputs, const std::string& source) const {
  return CheckFlux2ForwardInputs(model_inputs, config_, source);
}

int64_t Flux2Family::LatentTokens(at::IntArrayRef sample_latents) const {
  return sample_latents.empty() ? 0 : sample_latents[0];  // [Si, C] packed tokens
}

absl::Status Flux2Family::CheckCacheFits(const CacheContents& cache) const {
  if (cache.latent_channels != config_.in_channels || cache.text_dim != config_.joint_attention_dim) {
    return absl::InvalidArgumentError(absl::StrCat("latent channels ", cache.latent_channels, " vs ",
                                                   config_.in_channels, ", text dim ", cache.text_dim, " vs ",
                                                   config_.joint_attention_dim));
  }
  if (!cache.conditioning.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the cache carries image-to-video conditioning '",
                                                   cache.conditioning, "', which FLUX.2 does not take"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> Flux2Family::MicroBatchInputs(const NoisyBatch& batch) const {
  if (batch.noisy.dim() != 3 || batch.noisy.size(2) != config_.in_channels) {
    return absl::InvalidArgumentError(absl::StrCat("FLUX.2 latents are ", ShapeString(batch.noisy.sizes()),
                                                   ", expected [b, tokens, ", config_.in_channels, "]"));
  }
  if (batch.grid_h * batch.grid_w != batch.noisy.size(1)) {
    return absl::InvalidArgumentError(absl::StrCat("FLUX.2 latents hold ", batch.noisy.size(1), " tokens, not the ",
                                                   batch.grid_h, "x", batch.grid_w, " grid of their cache record"));
  }
  TensorMap in{{"hidden_states", batch.noisy},
               {"encoder_hidden_states", batch.prompt_embeds},
               {"timestep", batch.timestep},
               {"img_ids", ImagePositionIds(batch.grid_h, batch.grid_w)},
               {"txt_ids", TextPositionIds(batch.prompt_embeds.size(1))}};
  if (batch.references.defined()) {  // Flux2Pipeline: cat([latents, image_latents]), cat([latent_ids, image_ids])
    int64_t tokens = 0;
    for (const auto& [h, w] : batch.reference_grids) tokens += h * w;
    const at::Tensor& r = batch.references;
    if (batch.reference_grids.empty() || r.dim() != 3 || r.size(0) != batch.noisy.size(0) || r.size(1) != tokens ||
        r.size(2) != config_.in_channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FLUX.2 reference latents are ", ShapeString(r.sizes()), ", expected [", batch.noisy.size(0), ", ", tokens,
          ", ", config_.in_channels, "] for ", batch.reference_grids.size(), " reference grids"));
    }
    in["hidden_states"] = at::cat({batch.noisy, r.to(batch.noisy.scalar_type())}, 1);
    in["img_ids"] = at::cat({in["img_ids"], ReferencePositionIds(batch.reference_grids)}, 0);
  }
  if (config_.guidance_embeds) in["guidance"] = at::full({batch.noisy.size(0)}, batch.guidance, at::kFloat);
  return in;
}

at::Tensor Flux2Family::LossMask(const NoisyBatch& batch) const {
  if (!batch.loss_weights.defined()) return at::Tensor();
  return batch.loss_weights.reshape({batch.loss_weights.size(0), -1, 1});  // row-major over the grid, as the tokens
}

absl::StatusOr<std::vector<std::string>> Flux2Family::LoraTargets(const std::string& preset_or_list) const {
  return ResolveLoraTargets(preset_or_list);
}

absl::StatusOr<TensorMap> Flux2Family::LoraToOriginalNames(const TensorMap& peft) const { return LoraTensorsBfl(peft); }

// BFL fuses each double block's q, k and v (img and txt) into one Linear: a fused Linear's adapter needs all three of
// its parts (known before training, not at the first save), and a LoKr cannot be written across them.
absl::Status Flux2Family::CheckOriginalNaming(const LoraSpec& spec) const {
  std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> groups;  // parts, targeted
  std::vector<std::string> fused;
  for (const std::string& leaf : Flux2FusedLeaves()) {
    const std::string module = DiffusersToBfl(absl::StrCat("transformer_blocks.0.", leaf))->key;
    groups[module].first.push_back(leaf);
    if (!LoraTargetMatches(absl::StrCat("transformer_blocks.0.", leaf), spec.targets)) continue;
    groups[module].second.push_back(leaf);
    fused.push_back(leaf);
  }
  for (const auto& [module, parts] : groups) {
    if (parts.second.empty() || parts.second.size() == parts.first.size()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "save_bfl: BFL fuses ", absl::StrJoin(parts.first, ", "), " into one Linear (", module,
        "), and lora.targets adapts only ", absl::StrJoin(parts.second, ", "),
        ": target all of them or none, or leave save_bfl off (lora.safetensors, diffusers-named, has any subset)"));
  }
  if (spec.type != AdapterType::kLokr || fused.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "save_bfl: a LoKr on ", absl::StrJoin(fused, ", "),
      " has no FLUX.2 original (BFL/ComfyUI) naming: BFL fuses q, k and v into one Linear, and Kronecker products "
      "stacked are not one (leave them out of lora.targets, or load lora.safetensors, LyCORIS-named)"));
}

absl::StatusOr<TensorMap> Flux2Family::LoraFromOriginalNames(const TensorMap& original) const {
  return absl::UnimplementedError(
      absl::StrCat("FLUX.2: converting ", original.size(), " BFL LoRA tensors in memory; LoadLoraFile reads the file"));
}

}  // namespace baton
