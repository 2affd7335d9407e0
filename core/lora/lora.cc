#include "core/lora/lora.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/keys/flux2_keys.h"
#include "core/lora/adapter_file.h"
#include "core/lora/lora_linear.h"
#include "core/lora/original_adapters.h"
#include "core/lora/wan_lora_names.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kLoraA[] = ".lora_A.weight";
constexpr char kLoraB[] = ".lora_B.weight";
constexpr char kMagnitude[] = ".lora_magnitude_vector";  // DoRA's, by PEFT's saved name

bool InsideBlock(const std::string& name) {
  return absl::StartsWith(name, "transformer_blocks.") || absl::StartsWith(name, "single_transformer_blocks.") ||
         absl::StartsWith(name, "blocks.");  // Wan
}

// Groups PEFT-named tensors by module: module → (A, B). DoRA's magnitudes are skipped (their module has A and B).
absl::StatusOr<std::map<std::string, std::pair<at::Tensor, at::Tensor>>> GroupByModule(
    const std::map<std::string, at::Tensor>& params) {
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> out;
  for (const auto& [name, t] : params) {
    if (absl::EndsWith(name, kMagnitude)) continue;
    if (absl::EndsWith(name, kLoraA)) {
      out[name.substr(0, name.size() - strlen(kLoraA))].first = t;
    } else if (absl::EndsWith(name, kLoraB)) {
      out[name.substr(0, name.size() - strlen(kLoraB))].second = t;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("not a LoRA parameter name: ", name));
    }
  }
  for (const auto& [module, ab] : out) {
    if (!ab.first.defined() || !ab.second.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA module ", module, " lacks lora_A or lora_B"));
    }
  }
  return out;
}

// PEFT's per-module scale from a file's "lora_adapter_metadata" (a LoraConfig as JSON). Pipeline files
// (Flux2Pipeline.save_lora_weights, Baton) prefix the keys with "transformer."; transformer.save_lora_adapter
// files do not. Files without metadata were saved with alpha folded in (scale 1), as diffusers assumes.
struct PeftScaling {
  double alpha = -1;  // lora_alpha; < 0: none given
  bool rslora = false;
  std::map<std::string, double> alpha_pattern;  // module-name suffix → alpha

  double ScaleFor(const std::string& module, int64_t rank) const {
    double a = alpha;
    for (const auto& [pattern, value] : alpha_pattern) {
      if (module == pattern || absl::EndsWith(module, "." + pattern)) a = value;
    }
    if (a <= 0) return 1.0;
    return rslora ? a / std::sqrt(static_cast<double>(rank)) : a / static_cast<double>(rank);
  }
};

absl::StatusOr<PeftScaling> ParsePeftScaling(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("lora_adapter_metadata is not JSON");
  std::string prefix = j.contains("transformer.lora_alpha") ? "transformer." : "";
  PeftScaling out;
  try {
    if (j.contains(prefix + "lora_alpha")) out.alpha = j[prefix + "lora_alpha"].get<double>();
    if (j.contains(prefix + "use_rslora") && j[prefix + "use_rslora"].is_boolean()) {
      out.rslora = j[prefix + "use_rslora"].get<bool>();
    }
    if (j.contains(prefix + "alpha_pattern") && j[prefix + "alpha_pattern"].is_object()) {
      for (const auto& [k, v] : j[prefix + "alpha_pattern"].items()) out.alpha_pattern[k] = v.get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("lora_adapter_metadata: ", e.what()));
  }
  return out;
}

std::map<std::string, std::string> Metadata(const LoraSpec& spec, const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "pt";
  return meta;
}

}  // namespace

std::map<std::string, std::string> LoraFileMetadata(const LoraSpec& spec,
                                                    const std::map<std::string, std::string>& extra) {
  return Metadata(spec, extra);
}

absl::StatusOr<std::vector<std::string>> ResolveLoraTargets(const std::string& preset_or_list) {
  if (preset_or_list == "attention") {
    return std::vector<std::string>{"to_q",       "to_k",       "to_v",       "to_out.0",        "add_q_proj",
                                    "add_k_proj", "add_v_proj", "to_add_out", "to_qkv_mlp_proj", "attn.to_out"};
  }
  if (preset_or_list == "all-linear") {
    return std::vector<std::string>{"to_q",
                                    "to_k",
                                    "to_v",
                                    "to_out.0",
                                    "add_q_proj",
                                    "add_k_proj",
                                    "add_v_proj",
                                    "to_add_out",
                                    "to_qkv_mlp_proj",
                                    "attn.to_out",
                                    "ff.linear_in",
                                    "ff.linear_out",
                                    "ff_context.linear_in",
                                    "ff_context.linear_out",
                                    "ffn.net.0.proj",  // Wan's feed-forward (no FLUX.2 module ends so)
                                    "ffn.net.2"};
  }
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(preset_or_list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  if (out.empty()) return absl::InvalidArgumentError("LoRA targets: empty list");
  return out;
}

bool LoraTargetMatches(const std::string& name, const std::vector<std::string>& targets) {
  for (const auto& t : targets) {
    if (name == t) return true;
    if (InsideBlock(name) && absl::EndsWith(name, "." + t)) return true;
  }
  return false;
}

absl::StatusOr<int> AttachLora(torch::nn::Module& root, const LoraSpec& spec) {
  if (spec.rank <= 0) return absl::InvalidArgumentError("LoRA rank must be positive");
  if (spec.dropout < 0 || spec.dropout >= 1) return absl::InvalidArgumentError("LoRA dropout must be in [0, 1)");
  const bool factors = spec.type == AdapterType::kLoha || spec.type == AdapterType::kLokr;
  if (factors && spec.dropout > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA dropout does not apply to ", AdapterTypeName(spec.type), " (peft's has no input dropout)"));
  }
  int count = 0;
  for (auto& [name, linear] : NamedLoraLinears(root)) {
    if (!LoraTargetMatches(name, spec.targets)) continue;
    if (spec.type == AdapterType::kLokr && spec.lokr_factor > 0 &&
        (linear->in_features() % spec.lokr_factor != 0 || linear->out_features() % spec.lokr_factor != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("LoKr factor ", spec.lokr_factor, " does not divide ", name, " (",
                                                     linear->in_features(), " -> ", linear->out_features(), ")"));
    }
    linear->AttachAdapter(spec.type, spec.rank, spec.alpha, spec.dropout, spec.lokr_factor,
                          MixSeed(spec.seed, HashName(name)));
    linear->set_math_dtype(spec.dtype);
    linear->set_layer_id(HashName(name));
    ++count;
  }
  return count;
}

std::map<std::string, at::Tensor> LoraParameters(torch::nn::Module& root) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, linear] : NamedLoraLinears(root)) {
    for (const auto& [suffix, t] : linear->adapter_parameters()) out[name + "." + suffix] = t;
  }
  return out;
}

std::map<std::string, at::Tensor> LoraGradients(torch::nn::Module& root) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, p] : LoraParameters(root)) {
    out[name] = p.grad().defined() ? p.grad() : at::zeros_like(p);
  }
  return out;
}

void ZeroLoraGradients(torch::nn::Module& root) {
  for (auto& [name, p] : LoraParameters(root)) {
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

absl::Status AssignLoraParameters(torch::nn::Module& root, const std::map<std::string, at::Tensor>& values) {
  auto params = LoraParameters(root);
  std::vector<std::string> problems;
  for (auto& [name, p] : params) {
    auto it = values.find(name);
    if (it == values.end()) {
      problems.push_back(absl::StrCat(name, " (missing)"));
    } else if (it->second.sizes() != p.sizes()) {
      problems.push_back(
          absl::StrCat(name, " (expected ", ShapeString(p.sizes()), ", got ", ShapeString(it->second.sizes()), ")"));
    }
  }
  for (const auto& [name, t] : values) {
    if (!params.count(name)) problems.push_back(absl::StrCat(name, " (no such adapter here)"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA weights do not fit the model: ", absl::StrJoin(problems, ", ")));
  }
  at::NoGradGuard no_grad;
  for (auto& [name, p] : params) p.copy_(values.at(name));
  return absl::OkStatus();
}

void SetLoraDropoutSeed(torch::nn::Module& root, uint64_t seed) {
  for (auto& [name, linear] : NamedLoraLinears(root)) linear->set_dropout_seed(seed);
}

absl::Status SaveLoraDiffusers(const std::string& path, const std::map<std::string, at::Tensor>& params,
                               const LoraSpec& spec, const std::map<std::string, std::string>& extra_metadata) {
  ASSIGN_OR_RETURN(auto modules, GroupByModule(params));
  // alpha/r is folded into lora_B and the metadata says lora_alpha = r: the file means the same with or without
  // its metadata (transformer.load_lora_adapter(path) without use_safetensors=True, and many tools, ignore it).
  const double scale = spec.alpha / static_cast<double>(spec.rank);
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : params) {
    at::Tensor v = t.detach().to(at::kFloat).cpu();
    out["transformer." + name] = absl::EndsWith(name, kLoraB) && scale != 1.0 ? v * scale : v;
  }
  std::set<std::string> target_names;
  for (const auto& [module, ab] : modules) target_names.insert(module);
  nlohmann::ordered_json adapter;
  adapter["transformer.r"] = spec.rank;
  adapter["transformer.lora_alpha"] = spec.rank;
  adapter["transformer.lora_dropout"] = spec.dropout;
  adapter["transformer.target_modules"] = std::vector<std::string>(target_names.begin(), target_names.end());
  adapter["transformer.peft_type"] = "LORA";
  adapter["transformer.bias"] = "none";
  if (spec.type == AdapterType::kDora) adapter["transformer.use_dora"] = true;
  auto meta = Metadata(spec, extra_metadata);
  meta["lora_adapter_metadata"] = adapter.dump();
  return WriteSafetensors(path, out, meta);
}

absl::StatusOr<std::map<std::string, at::Tensor>> LoraTensorsBfl(const std::map<std::string, at::Tensor>& params,
                                                                 double scale) {
  ASSIGN_OR_RETURN(auto adapters, AdaptersFromParameters(params, scale));
  return AdaptersToOriginal(adapters, Flux2OriginalNaming());
}

absl::Status SaveLoraBfl(const std::string& path, const std::map<std::string, at::Tensor>& params, const LoraSpec& spec,
                         const std::map<std::string, std::string>& extra_metadata) {
  ASSIGN_OR_RETURN(auto out, LoraTensorsBfl(params, spec.alpha / static_cast<double>(spec.rank)));
  return WriteSafetensors(path, out, Metadata(spec, extra_metadata));
}

namespace {

// A file's adapter must be a product B·A a model can use: A [r, in] and B [out, r] with r ≥ 1. Checked before any
// arithmetic on the shapes, so a malformed file is an error naming the module, not an exception.
absl::Status CheckAdapterShapes(const std::string& path, const std::string& module, const at::Tensor& a,
                                const at::Tensor& b) {
  if (a.dim() == 2 && b.dim() == 2 && a.size(0) >= 1 && b.size(1) == a.size(0)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, ": LoRA module ", module, " has lora_A ", ShapeString(a.sizes()),
                                                 " and lora_B ", ShapeString(b.sizes()),
                                                 " (want [r, in] and [out, r], r >= 1)"));
}

}  // namespace

absl::StatusOr<std::map<std::string, LoraWeights>> LoadLoraFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  std::map<std::string, at::Tensor> raw;
  for (const auto& key : file->Keys()) {
    ASSIGN_OR_RETURN(raw[key], file->Load(key, at::kFloat));
  }
  if (IsLycorisFile(raw)) return LycorisAdapters(path, raw);
  if (!raw.empty() && absl::StartsWith(raw.begin()->first, "diffusion_model.")) {
    std::vector<std::string> keys;
    for (const auto& [key, t] : raw) keys.push_back(key);
    return AdaptersFromOriginal(path, raw, LooksLikeWanLora(keys) ? WanOriginalNaming() : Flux2OriginalNaming());
  }
  std::map<std::string, LoraWeights> out;
  PeftScaling scaling;
  auto it = file->metadata().find("lora_adapter_metadata");
  if (it != file->metadata().end()) {
    auto parsed = ParsePeftScaling(it->second);
    if (!parsed.ok()) return Annotate(parsed.status(), path);
    scaling = *parsed;
  }
  std::map<std::string, at::Tensor> params;
  for (auto& [key, t] : raw) {
    absl::string_view name = key;
    absl::ConsumePrefix(&name, "transformer.");
    params[std::string(name)] = t;
  }
  auto grouped = GroupByModule(params);
  if (!grouped.ok()) return Annotate(grouped.status(), path);
  for (auto& [module, ab] : *grouped) {
    RETURN_IF_ERROR(CheckAdapterShapes(path, module, ab.first, ab.second));
    out[module] = LoraWeights{ab.first, ab.second, scaling.ScaleFor(module, ab.first.size(0))};
    auto magnitude = params.find(module + kMagnitude);
    if (magnitude != params.end()) {
      out[module].type = AdapterType::kDora;
      out[module].other["lora_magnitude_vector"] = magnitude->second;
    }
  }
  return out;
}

namespace {

// Every tensor of one adapter by its PEFT name after the module ("lora_A.weight", "hada_w1_a", ...).
std::map<std::string, at::Tensor> AdapterTensors(const LoraWeights& w) {
  std::map<std::string, at::Tensor> all = w.other;
  if (w.A.defined()) all["lora_A.weight"] = w.A;
  if (w.B.defined()) all["lora_B.weight"] = w.B;
  return all;
}

// Why a LoHa or LoKr adapter from a file cannot sit on a Linear in → out ("" when it fits).
std::string FactorsMisfit(const LoraWeights& w, int64_t in, int64_t out) {
  std::vector<std::string> shapes;
  for (const auto& [name, t] : w.other) {
    if (t.dim() != 2) return absl::StrCat(name, " is ", ShapeString(t.sizes()), ", not a matrix");
    shapes.push_back(absl::StrCat(name, " ", ShapeString(t.sizes())));
  }
  auto at = [&](const char* n) { return w.other.count(n) ? w.other.at(n) : at::Tensor(); };
  bool fits;
  if (w.type == AdapterType::kLoha) {
    const at::Tensor a1 = at("hada_w1_a"), b1 = at("hada_w1_b"), a2 = at("hada_w2_a"), b2 = at("hada_w2_b");
    fits = a1.size(0) == out && a2.size(0) == out && b1.size(1) == in && b2.size(1) == in && a1.size(1) == b1.size(0) &&
           a2.size(1) == b2.size(0);
  } else {
    const at::Tensor w1 = at("lokr_w1"), w2 = at("lokr_w2"), w2a = at("lokr_w2_a"), w2b = at("lokr_w2_b");
    const bool full = w2.defined();
    const int64_t rows = full ? w2.size(0) : w2a.size(0), cols = full ? w2.size(1) : w2b.size(1);
    fits = (full || w2a.size(1) == w2b.size(0)) && w1.size(0) * rows == out && w1.size(1) * cols == in;
  }
  if (fits) return "";
  return absl::StrCat(absl::StrJoin(shapes, ", "), " do not fit a Linear ", in, " -> ", out);
}

}  // namespace

absl::StatusOr<int> AttachLoraWeights(torch::nn::Module& root, const std::map<std::string, LoraWeights>& file_weights,
                                      double multiplier) {
  std::map<std::string, LoraLinear> linears;
  std::vector<std::string> names;
  for (auto& [name, linear] : NamedLoraLinears(root)) {
    linears.emplace(name, linear);
    names.push_back(name);
  }
  ASSIGN_OR_RETURN(const auto weights, ResolveLycorisNames(file_weights, names));
  std::vector<std::string> problems;
  for (const auto& [module, w] : weights) {
    auto it = linears.find(module);
    if (it == linears.end()) {
      problems.push_back(absl::StrCat(module, " (no such Linear in the model)"));
      continue;
    }
    LoraLinearImpl& linear = *it->second;
    if (w.type == AdapterType::kLoha || w.type == AdapterType::kLokr) {
      std::string misfit = FactorsMisfit(w, linear.in_features(), linear.out_features());
      if (!misfit.empty()) problems.push_back(absl::StrCat(module, " (", misfit, ")"));
      continue;
    }
    const int64_t r = w.A.dim() == 2 ? w.A.size(0) : -1;
    if (r <= 0 || w.A.size(1) != linear.in_features() || w.B.dim() != 2 || w.B.size(0) != linear.out_features() ||
        w.B.size(1) != r) {
      problems.push_back(absl::StrCat(module, " (lora_A [", absl::StrJoin(w.A.sizes(), ", "), "], lora_B [",
                                      absl::StrJoin(w.B.sizes(), ", "), "] do not fit a Linear ", linear.in_features(),
                                      " -> ", linear.out_features(), ")"));
    } else if (w.type == AdapterType::kDora &&
               !w.other.at("lora_magnitude_vector").sizes().equals({linear.out_features()})) {
      problems.push_back(absl::StrCat(module, " (lora_magnitude_vector ",
                                      ShapeString(w.other.at("lora_magnitude_vector").sizes()), " is not [",
                                      linear.out_features(), "])"));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA does not fit the model: ", absl::StrJoin(problems, ", ")));
  }
  at::NoGradGuard no_grad;
  for (const auto& [module, w] : weights) {
    LoraLinearImpl& linear = *linears.at(module);
    linear.AttachAdapterTensors(w.type, w.scale * multiplier, AdapterTensors(w));
  }
  return static_cast<int>(weights.size());
}

std::map<std::string, at::Tensor> LoraWeightsToParameters(const std::map<std::string, LoraWeights>& weights,
                                                          double target_scale) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [module, w] : weights) {
    const std::string linear = LinearFactorName(w.type);
    for (const auto& [name, t] : AdapterTensors(w)) {
      const bool fold = name == linear && std::abs(w.scale - target_scale) >= 1e-12;
      out[module + "." + name] = fold ? t * (w.scale / target_scale) : t;
    }
  }
  return out;
}

}  // namespace baton
