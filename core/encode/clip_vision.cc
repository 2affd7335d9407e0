#include "core/encode/clip_vision.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <torch/nn/module.h>

#include <cmath>
#include <map>
#include <utility>

#include "core/encode/clip_image_processor.h"
#include "core/tensor/checked_load.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// A module of uninitialised parameters named as transformers names them, only so LoadModuleFromFolder can check and
// fill them (no values are drawn: ViT-H has 630 M of them).
class ParamNode : public torch::nn::Module {
 public:
  ParamNode* Child(const std::string& name) { return register_module(name, std::make_shared<ParamNode>()).get(); }
  at::Tensor Param(const std::string& name, std::vector<int64_t> shape, const at::TensorOptions& options) {
    return register_parameter(name, at::empty(shape, options), /*requires_grad=*/false);
  }
  // weight [out, in] (+ bias [out]) of an nn.Linear.
  std::pair<at::Tensor, at::Tensor> Linear(const std::string& name, int64_t out, int64_t in,
                                           const at::TensorOptions& options) {
    ParamNode* n = Child(name);
    at::Tensor w = n->Param("weight", {out, in}, options);
    return {w, n->Param("bias", {out}, options)};
  }
  // weight [d] + bias [d] of an nn.LayerNorm.
  std::pair<at::Tensor, at::Tensor> Norm(const std::string& name, int64_t d, const at::TensorOptions& options) {
    ParamNode* n = Child(name);
    at::Tensor w = n->Param("weight", {d}, options);
    return {w, n->Param("bias", {d}, options)};
  }
};

// The layer index of "encoder.layers.N.<rest>", or -1.
int64_t LayerIndex(absl::string_view rest) {
  constexpr absl::string_view kLayers = "encoder.layers.";
  if (!absl::StartsWith(rest, kLayers)) return -1;
  rest.remove_prefix(kLayers.size());
  const size_t dot = rest.find('.');
  int64_t index = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &index)) return -1;
  return index;
}

at::Tensor Activate(ClipActivation act, const at::Tensor& x) {
  switch (act) {
    case ClipActivation::kQuickGelu:
      return x * at::sigmoid(1.702 * x);
    case ClipActivation::kGeluErf:
      return at::gelu(x);
    case ClipActivation::kGeluTanh:
      return at::gelu(x, "tanh");
    case ClipActivation::kRelu:
      return at::relu(x);
    case ClipActivation::kSilu:
      return at::silu(x);
  }
  return x;
}

// The keys of the folder's checkpoint (index or single file), for the layout check.
absl::StatusOr<std::vector<std::string>> CheckpointKeys(const std::string& dir) {
  if (PathExists(JoinPath(dir, "model.safetensors.index.json"))) {
    ASSIGN_OR_RETURN(auto index, ReadSafetensorsIndex(dir, "model"));
    std::vector<std::string> keys;
    for (const auto& [key, file] : index) keys.push_back(key);
    return keys;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> paths, SafetensorsShardPaths(dir, "model"));
  ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(paths.front()));
  return file->Keys();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClipVisionEncoder>> ClipVisionEncoder::Load(const std::string& dir, at::ScalarType dtype,
                                                                           at::Device device) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf && dtype != at::kDouble) {
    return absl::InvalidArgumentError(
        absl::StrCat("CLIP vision compute dtype must be floating, got ", c10::toString(dtype)));
  }
  std::unique_ptr<ClipVisionEncoder> enc(new ClipVisionEncoder());
  enc->dtype_ = dtype;
  enc->device_ = device;
  ASSIGN_OR_RETURN(enc->config_, LoadClipVisionConfig(JoinPath(dir, "config.json")));
  ASSIGN_OR_RETURN(enc->activation_, enc->config_.activation());
  const ClipVisionConfig& c = enc->config_;

  ASSIGN_OR_RETURN(std::vector<std::string> keys, CheckpointKeys(dir));
  std::string prefix;
  bool found = false;
  for (const char* candidate : {"vision_model.", ""}) {
    for (const auto& key : keys) found = found || key == absl::StrCat(candidate, "embeddings.class_embedding");
    if (found) {
      prefix = candidate;
      break;
    }
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat(dir,
                                            ": no CLIP vision tensors ('vision_model.embeddings.class_embedding' or "
                                            "'embeddings.class_embedding'); is this a CLIPVisionModel folder?"));
  }

  const int64_t d = c.hidden_size, inner = c.intermediate_size, run_layers = c.num_hidden_layers - 1;
  const at::TensorOptions opts = at::TensorOptions().dtype(dtype).device(device);
  ParamNode root;
  ParamNode* vision = prefix.empty() ? &root : root.Child("vision_model");
  RETURN_IF_ERROR(TorchCall("CLIP vision parameters", [&] {
    ParamNode* emb = vision->Child("embeddings");
    enc->class_embedding_ = emb->Param("class_embedding", {d}, opts);
    enc->patch_embedding_ =
        emb->Child("patch_embedding")->Param("weight", {d, c.num_channels, c.patch_size, c.patch_size}, opts);
    enc->position_embedding_ = emb->Child("position_embedding")->Param("weight", {c.num_positions(), d}, opts);
    std::tie(enc->pre_ln_w_, enc->pre_ln_b_) = vision->Norm("pre_layrnorm", d, opts);
    ParamNode* layers = vision->Child("encoder")->Child("layers");
    for (int64_t i = 0; i < run_layers; ++i) {
      ParamNode* layer = layers->Child(std::to_string(i));
      ParamNode* attn = layer->Child("self_attn");
      ParamNode* mlp = layer->Child("mlp");
      Layer l;
      std::tie(l.k_w, l.k_b) = attn->Linear("k_proj", d, d, opts);
      std::tie(l.v_w, l.v_b) = attn->Linear("v_proj", d, d, opts);
      std::tie(l.q_w, l.q_b) = attn->Linear("q_proj", d, d, opts);
      std::tie(l.o_w, l.o_b) = attn->Linear("out_proj", d, d, opts);
      std::tie(l.ln1_w, l.ln1_b) = layer->Norm("layer_norm1", d, opts);
      std::tie(l.fc1_w, l.fc1_b) = mlp->Linear("fc1", inner, d, opts);
      std::tie(l.fc2_w, l.fc2_b) = mlp->Linear("fc2", d, inner, opts);
      std::tie(l.ln2_w, l.ln2_b) = layer->Norm("layer_norm2", d, opts);
      enc->layers_.push_back(std::move(l));
    }
  }));
  // Claimed (so an extra tensor there is an error): the embeddings, pre_layrnorm and every encoder tensor but the
  // last layer's, which is not run. Not claimed: post_layernorm, position_ids, a CLIPModel's other towers.
  auto ours = [&](const std::string& key) {
    if (!absl::StartsWith(key, prefix)) return false;
    absl::string_view rest = absl::string_view(key).substr(prefix.size());
    if (rest == "embeddings.position_ids") return false;
    if (absl::StartsWith(rest, "embeddings.") || absl::StartsWith(rest, "pre_layrnorm.")) return true;
    if (!absl::StartsWith(rest, "encoder.")) return false;
    return LayerIndex(rest) != c.num_hidden_layers - 1;
  };
  RETURN_IF_ERROR(LoadModuleFromFolder(root, /*buffers=*/false, dir, "model", ours,
                                       absl::StrCat(dir, ": the CLIP vision checkpoint does not match its config")));
  return enc;
}

absl::StatusOr<at::Tensor> ClipVisionEncoder::PenultimateHiddenStates(const at::Tensor& pixel_values) const {
  const ClipVisionConfig& c = config_;
  if (!pixel_values.defined() || pixel_values.dim() != 4 || pixel_values.size(0) < 1 ||
      pixel_values.size(1) != c.num_channels || pixel_values.size(2) != c.image_size ||
      pixel_values.size(3) != c.image_size || !at::isFloatingType(pixel_values.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat("CLIP vision: pixel_values must be a floating [B, ", c.num_channels,
                                                   ", ", c.image_size, ", ", c.image_size, "] tensor, got ",
                                                   DtypeShapeString(pixel_values)));
  }
  at::Tensor out;
  RETURN_IF_ERROR(TorchCall("CLIP vision forward", [&] {
    at::NoGradGuard no_grad;
    const int64_t b = pixel_values.size(0), d = c.hidden_size, t = c.num_positions();
    const int64_t heads = c.num_attention_heads, hd = c.head_dim();
    const double eps = c.layer_norm_eps, scale = std::pow(static_cast<double>(hd), -0.5);
    at::Tensor x = pixel_values.to(device_, dtype_);
    at::Tensor patches = at::conv2d(x, patch_embedding_, {}, {c.patch_size, c.patch_size});  // [B, D, g, g]
    patches = patches.flatten(2).transpose(1, 2);                                            // [B, g², D]
    at::Tensor h = at::cat({class_embedding_.view({1, 1, d}).expand({b, 1, d}), patches}, 1);
    h = h + position_embedding_.unsqueeze(0);
    h = at::layer_norm(h, {d}, pre_ln_w_, pre_ln_b_, eps);
    for (const Layer& l : layers_) {
      at::Tensor y = at::layer_norm(h, {d}, l.ln1_w, l.ln1_b, eps);
      auto split = [&](const at::Tensor& w, const at::Tensor& bias) {
        return at::linear(y, w, bias).view({b, t, heads, hd}).transpose(1, 2);
      };
      at::Tensor a = at::scaled_dot_product_attention(split(l.q_w, l.q_b), split(l.k_w, l.k_b), split(l.v_w, l.v_b), {},
                                                      0.0, false, scale);
      h = h + at::linear(a.transpose(1, 2).reshape({b, t, d}), l.o_w, l.o_b);
      y = at::layer_norm(h, {d}, l.ln2_w, l.ln2_b, eps);
      h = h + at::linear(Activate(activation_, at::linear(y, l.fc1_w, l.fc1_b)), l.fc2_w, l.fc2_b);
    }
    out = h.to(at::kFloat);
  }));
  return out;
}

absl::StatusOr<ClipFolders> FindClipFolders(const std::string& model_dir) {
  ClipFolders f;
  auto processor_in = [](const std::string& dir) {
    const std::string path = JoinPath(dir, "preprocessor_config.json");
    return PathExists(path) ? path : std::string();
  };
  if (IsDirectory(JoinPath(model_dir, "image_encoder"))) {
    f.image_encoder = JoinPath(model_dir, "image_encoder");
    f.image_processor = processor_in(JoinPath(model_dir, "image_processor"));
    return f;
  }
  if (!PathExists(JoinPath(model_dir, "config.json"))) {
    return absl::NotFoundError(
        absl::StrCat(model_dir,
                     ": neither a pipeline folder with image_encoder/ nor a CLIPVisionModel folder "
                     "(config.json)"));
  }
  f.image_encoder = model_dir;
  f.image_processor = processor_in(model_dir);
  if (f.image_processor.empty()) f.image_processor = processor_in(JoinPath(model_dir, "../image_processor"));
  return f;
}

absl::Status WriteRandomClipVision(const ClipVisionConfig& c, const std::string& dir, uint64_t seed,
                                   const RandomClipVisionOptions& options) {
  RETURN_IF_ERROR(c.Validate());
  RETURN_IF_ERROR(MakeDirs(dir));
  const int64_t d = c.hidden_size, inner = c.intermediate_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"embeddings.class_embedding", {d}},
      {"embeddings.patch_embedding.weight", {d, c.num_channels, c.patch_size, c.patch_size}},
      {"embeddings.position_embedding.weight", {c.num_positions(), d}},
      {"pre_layrnorm.weight", {d}},
      {"pre_layrnorm.bias", {d}},
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("encoder.layers.", i, ".");
    for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
      specs.push_back({absl::StrCat(p, "self_attn.", proj, ".weight"), {d, d}});
      specs.push_back({absl::StrCat(p, "self_attn.", proj, ".bias"), {d}});
    }
    specs.push_back({p + "layer_norm1.weight", {d}});
    specs.push_back({p + "layer_norm1.bias", {d}});
    specs.push_back({p + "mlp.fc1.weight", {inner, d}});
    specs.push_back({p + "mlp.fc1.bias", {inner}});
    specs.push_back({p + "mlp.fc2.weight", {d, inner}});
    specs.push_back({p + "mlp.fc2.bias", {d}});
    specs.push_back({p + "layer_norm2.weight", {d}});
    specs.push_back({p + "layer_norm2.bias", {d}});
  }
  specs.push_back({"post_layernorm.weight", {d}});
  specs.push_back({"post_layernorm.bias", {d}});
  const std::string prefix = options.vision_model_prefix ? "vision_model." : "";
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  RETURN_IF_ERROR(TorchCall("random CLIP vision weights", [&] {
    for (const auto& [name, shape] : specs) {
      auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(name)));
      at::Tensor t = at::randn(shape, gen, at::kFloat);
      const bool norm = absl::StrContains(name, "layer_norm") || absl::StrContains(name, "layrnorm");
      if (norm) {
        t = absl::EndsWith(name, ".bias") ? 0.1 * t : 1.0 + 0.2 * t;
      } else if (absl::EndsWith(name, ".bias")) {
        t = 0.1 * t;
      } else if (name == "embeddings.position_embedding.weight") {
        t = 0.5 * t;
      } else if (shape.size() >= 2) {
        t = t / std::sqrt(static_cast<double>(t.numel() / shape[0]));  // 1/sqrt(fan_in)
      }
      tensors.emplace_back(prefix + name, options.bf16 ? t.to(at::kBFloat16) : t);
    }
  }));
  RETURN_IF_ERROR(WriteShardedSafetensors(dir, "model", tensors, {{"format", "pt"}}, options.max_shard_bytes));
  return WriteFileAtomic(JoinPath(dir, "config.json"), ClipVisionConfigToJson(c));
}

absl::Status WriteRandomClipPipelineFolders(const ClipVisionConfig& config, const std::string& pipeline_dir,
                                            uint64_t seed) {
  RETURN_IF_ERROR(WriteRandomClipVision(config, JoinPath(pipeline_dir, "image_encoder"), seed));
  return WriteClipImageProcessorConfig(ClipImageProcessorConfigForSize(config.image_size),
                                       JoinPath(pipeline_dir, "image_processor"));
}

}  // namespace baton
