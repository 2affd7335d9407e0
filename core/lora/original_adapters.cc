#include "core/lora/original_adapters.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/strip.h>

#include <cmath>
#include <utility>

#include "core/keys/flux2_keys.h"
#include "core/lora/adapter_file.h"
#include "core/lora/wan_lora_names.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kOriginalKeyPrefix[] = "diffusion_model.";
constexpr char kPartA[] = "lora_A.weight";
constexpr char kPartB[] = "lora_B.weight";
constexpr char kPartMagnitude[] = "lora_magnitude_vector";  // peft's name, as LoraWeights::other keeps it
constexpr char kPartDoraScale[] = "dora_scale";             // the original naming's (kohya/LyCORIS), [out, 1]

// Every tensor name an original-naming adapter may have after its module (none is a suffix of another after a dot).
const std::vector<std::string>& OriginalParts() {
  static const auto* parts =
      new std::vector<std::string>{kPartA,      kPartB,      "alpha",   kPartDoraScale, "hada_w1_a", "hada_w1_b",
                                   "hada_w2_a", "hada_w2_b", "lokr_w1", "lokr_w2",      "lokr_w2_a", "lokr_w2_b"};
  return *parts;
}

at::Tensor& Part(LoraWeights& w, const std::string& name) {
  if (name == kPartA) return w.A;
  if (name == kPartB) return w.B;
  return w.other[name];
}
const at::Tensor& Part(const LoraWeights& w, const std::string& name) {
  if (name == kPartA) return w.A;
  if (name == kPartB) return w.B;
  return w.other.at(name);
}

// The factors whose rows are the adapter's output rows (a lokr_w1 row spans out_k of them).
std::vector<std::string> RowFactors(AdapterType type) {
  switch (type) {
    case AdapterType::kDora:
      return {kPartB, kPartMagnitude};
    case AdapterType::kLoha:
      return {"hada_w1_a", "hada_w2_a"};
    case AdapterType::kLokr:
      return {"lokr_w1"};
    default:
      return {kPartB};
  }
}

absl::Status CheckRowsDivide(const std::string& module, const LoraWeights& w, int64_t n, const char* why) {
  for (const auto& name : RowFactors(w.type)) {
    const at::Tensor& t = Part(w, name);
    if (t.size(0) % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat("the ", AdapterDisplayName(w.type), " on ", module, " cannot ",
                                                     why, ": its ", name, " has ", t.size(0),
                                                     " rows, not a multiple of ", n));
    }
  }
  return absl::OkStatus();
}

// The adapter with its output rows' halves swapped (FLUX.2's norm_out.linear: BFL's (shift, scale) order).
absl::StatusOr<LoraWeights> SwapOutputHalves(const std::string& module, LoraWeights w) {
  RETURN_IF_ERROR(CheckRowsDivide(module, w, 2, "swap its output halves"));
  for (const auto& name : RowFactors(w.type)) Part(w, name) = SwapHalves(Part(w, name));
  return w;
}

// One adapter for a fused module from its parts (same type, scale 1), stacked along the output rows.
absl::StatusOr<LoraWeights> Fuse(const std::string& module, const std::vector<LoraWeights>& parts) {
  LoraWeights out;
  out.type = parts.front().type;
  auto all = [&](const std::string& name) {
    std::vector<at::Tensor> ts;
    for (const auto& part : parts) ts.push_back(Part(part, name));
    return ts;
  };
  for (const auto& part : parts) {
    if (part.type != out.type) {
      return absl::InvalidArgumentError(absl::StrCat("the parts of ", module, " mix adapter types"));
    }
  }
  switch (out.type) {
    case AdapterType::kLora:
    case AdapterType::kDora:
      out.A = at::cat(all(kPartA), 0);      // [n·r, in]
      out.B = at::block_diag(all(kPartB));  // [n·out, n·r]
      if (out.type == AdapterType::kDora) out.other[kPartMagnitude] = at::cat(all(kPartMagnitude), 0);
      return out;
    case AdapterType::kLoha:
      out.other["hada_w1_a"] = at::block_diag(all("hada_w1_a"));
      out.other["hada_w1_b"] = at::cat(all("hada_w1_b"), 0);
      out.other["hada_w2_a"] = at::block_diag(all("hada_w2_a"));
      out.other["hada_w2_b"] = at::cat(all("hada_w2_b"), 0);
      return out;
    case AdapterType::kLokr:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("LoKr adapters have no original (ComfyUI) naming on ", module,
                   ", which the original model fuses from ", parts.size(),
                   " Linears: Kronecker products stacked are not one (keep the LyCORIS file, or leave those "
                   "Linears out of the LoKr's targets)"));
}

// Whether `m` is block-diagonal with n equal blocks.
bool BlockDiagonal(const at::Tensor& m, int64_t n) {
  if (m.dim() != 2 || m.size(0) % n != 0 || m.size(1) % n != 0) return false;
  const at::Tensor mask = at::block_diag(std::vector<at::Tensor>(n, at::ones({m.size(0) / n, m.size(1) / n})));
  return at::equal(m * (1 - mask), at::zeros_like(m));
}

// Output-row part i of n of a fused module's adapter: exact for every type; block-diagonal factors go back to their
// own rank, others keep the fused rank (lora: A shared, as diffusers splits a fused qkv LoRA).
absl::StatusOr<LoraWeights> Chunk(const std::string& module, LoraWeights w, int64_t i, int64_t n) {
  RETURN_IF_ERROR(CheckRowsDivide(module, w, n, "be split into its parts"));
  auto rows = [&](const at::Tensor& t) { return t.narrow(0, i * (t.size(0) / n), t.size(0) / n).contiguous(); };
  auto cols = [&](const at::Tensor& t) { return t.narrow(1, i * (t.size(1) / n), t.size(1) / n).contiguous(); };
  LoraWeights out = w;
  const std::vector<std::pair<std::string, std::string>> pairs =  // (row factor, its inner partner)
      w.type == AdapterType::kLoha
          ? std::vector<std::pair<std::string, std::string>>{{"hada_w1_a", "hada_w1_b"}, {"hada_w2_a", "hada_w2_b"}}
          : std::vector<std::pair<std::string, std::string>>{{kPartB, kPartA}};
  if (w.type == AdapterType::kLokr) {
    out.other["lokr_w1"] = rows(w.other["lokr_w1"]);
    return out;
  }
  bool block = true;
  for (const auto& [a, b] : pairs) block = block && BlockDiagonal(Part(w, a), n) && Part(w, b).size(0) % n == 0;
  for (const auto& [a, b] : pairs) {
    Part(out, a) = block ? cols(rows(Part(w, a))) : rows(Part(w, a));
    if (block) Part(out, b) = rows(Part(w, b));
  }
  if (w.type == AdapterType::kDora) out.other[kPartMagnitude] = rows(w.other[kPartMagnitude]);
  return out;
}

std::map<std::string, at::Tensor> OriginalTensors(const std::string& module, LoraWeights w) {
  const std::string base = absl::StrCat(kOriginalKeyPrefix, module, ".");
  std::map<std::string, at::Tensor> out;
  if (w.type == AdapterType::kLora || w.type == AdapterType::kDora) {
    out[base + kPartA] = w.A;
    // No ".alpha": diffusers' FLUX.2 converter accepts only lora_A/lora_B keys (it raises on leftovers) and, like
    // ComfyUI without ".alpha", applies the adapter with scale 1.
    out[base + kPartB] = w.B;
    if (w.type == AdapterType::kDora) out[base + kPartDoraScale] = w.other[kPartMagnitude].reshape({-1, 1});
    return out;
  }
  for (const auto& [name, t] : w.other) out[base + name] = t;
  out[base + "alpha"] = LycorisAlpha(w);
  return out;
}

// One lora or dora adapter from its original-naming parts.
absl::StatusOr<LoraWeights> LoraFromParts(const std::string& path, const std::string& module,
                                          std::map<std::string, at::Tensor> parts) {
  if (!parts.count(kPartA) || !parts.count(kPartB)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": LoRA module ", module, " lacks lora_A or lora_B"));
  }
  LoraWeights w{parts[kPartA], parts[kPartB], 1.0};
  const at::Tensor &a = w.A, &b = w.B;
  if (a.dim() < 2 || b.dim() < 2 || a.size(0) < 1 || b.size(1) != a.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": LoRA module ", module, " has lora_A ",
                                                   ShapeString(a.sizes()), " and lora_B ", ShapeString(b.sizes()),
                                                   " (want [r, in] and [out, r], r >= 1)"));
  }
  if (parts.count("alpha")) {
    const at::Tensor& alpha = parts["alpha"];
    const double value = alpha.numel() == 1 ? alpha.item<double>() : std::nan("");
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": LoRA module ", module,
                                                     ".alpha must be one finite number, is ", alpha.numel(),
                                                     " values of shape ", ShapeString(alpha.sizes())));
    }
    w.scale = value / static_cast<double>(a.size(0));
  }
  if (parts.count(kPartDoraScale)) {
    const at::Tensor& m = parts[kPartDoraScale];
    if (m.numel() != b.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": DoRA module ", module, ".dora_scale is ",
                                                     ShapeString(m.sizes()), ", want [", b.size(0), ", 1]"));
    }
    w.type = AdapterType::kDora;
    w.other[kPartMagnitude] = m.reshape({-1}).contiguous();
  }
  for (const auto& [name, t] : parts) {
    if (name != kPartA && name != kPartB && name != "alpha" && name != kPartDoraScale) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": module ", module, " mixes LoRA and ", name));
    }
  }
  return w;
}

// Adapters by original module → by diffusers module (fused modules split, swapped halves swapped back).
absl::StatusOr<std::map<std::string, LoraWeights>> ToDiffusersModules(std::map<std::string, LoraWeights> by_original,
                                                                      const OriginalNaming& naming,
                                                                      const std::string& path) {
  std::map<std::string, LoraWeights> out;
  for (auto& [module, w] : by_original) {
    const std::vector<std::string> names = naming.modules(module);
    if (names.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": unknown original LoRA module ", module));
    const int64_t n = static_cast<int64_t>(names.size());
    if (n == 1) {
      const auto place = naming.place(names[0]);
      if (place && place->swap_halves) {
        ASSIGN_OR_RETURN(w, SwapOutputHalves(module, std::move(w)));
      }
      out[names[0]] = std::move(w);
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(out[names[i]], Chunk(module, w, i, n));
    }
  }
  return out;
}

}  // namespace

const OriginalNaming& Flux2OriginalNaming() {
  static const auto* naming =
      new OriginalNaming{[](const std::string& module) -> std::optional<OriginalPlace> {
                           auto loc = DiffusersToBfl(module);
                           if (!loc) return std::nullopt;
                           return OriginalPlace{loc->key, loc->chunk, loc->num_chunks, loc->swap_halves};
                         },
                         [](const std::string& module) { return BflToDiffusers(module); },
                         [](const std::string& underscored) { return Flux2ModuleFromUnderscored(underscored); }};
  return *naming;
}

const OriginalNaming& WanOriginalNaming() {
  static const auto* naming =
      new OriginalNaming{[](const std::string& module) -> std::optional<OriginalPlace> {
                           auto original = WanDiffusersToOriginalModule(module);
                           if (!original) return std::nullopt;
                           return OriginalPlace{*original};
                         },
                         [](const std::string& module) {
                           auto diffusers = WanOriginalToDiffusersModule(module);
                           return diffusers ? std::vector<std::string>{*diffusers} : std::vector<std::string>{};
                         },
                         [](const std::string& underscored) { return WanModuleFromUnderscored(underscored); }};
  return *naming;
}

absl::StatusOr<std::map<std::string, at::Tensor>> AdaptersToOriginal(const std::map<std::string, LoraWeights>& adapters,
                                                                     const OriginalNaming& naming) {
  std::map<std::string, std::vector<std::optional<LoraWeights>>> by_original;  // original module → its parts
  for (const auto& [module, w] : adapters) {
    const auto place = naming.place(module);
    if (!place) return absl::InvalidArgumentError(absl::StrCat("no original name for LoRA module ", module));
    LoraWeights folded = WithScaleFolded(w);
    if (place->swap_halves) {
      ASSIGN_OR_RETURN(folded, SwapOutputHalves(module, std::move(folded)));
    }
    auto& slot = by_original[place->module];
    slot.resize(place->num_chunks);
    slot[place->chunk] = std::move(folded);
  }
  std::map<std::string, at::Tensor> out;
  for (auto& [module, slot] : by_original) {
    std::vector<LoraWeights> parts;
    for (size_t i = 0; i < slot.size(); ++i) {
      if (!slot[i]) {
        return absl::InvalidArgumentError(absl::StrCat("the original naming fuses ", slot.size(), " Linears into ",
                                                       module, ": adapter ", i, " of them is missing (target all ",
                                                       slot.size(), " or use the diffusers format)"));
      }
      parts.push_back(std::move(*slot[i]));
    }
    if (parts.size() == 1) {
      out.merge(OriginalTensors(module, std::move(parts.front())));
      continue;
    }
    ASSIGN_OR_RETURN(LoraWeights fused, Fuse(module, parts));
    out.merge(OriginalTensors(module, std::move(fused)));
  }
  return out;
}

absl::StatusOr<std::map<std::string, LoraWeights>> AdaptersFromOriginal(const std::string& path,
                                                                        const std::map<std::string, at::Tensor>& raw,
                                                                        const OriginalNaming& naming) {
  std::map<std::string, std::map<std::string, at::Tensor>> parts;  // original module → its tensors
  for (const auto& [key, t] : raw) {
    absl::string_view name = key;
    bool known = false;
    for (const std::string& part : OriginalParts()) {
      if (absl::ConsumePrefix(&name, kOriginalKeyPrefix) && absl::ConsumeSuffix(&name, "." + part) && !name.empty()) {
        parts[std::string(name)][part] = t;
        known = true;
        break;
      }
      name = key;
    }
    if (!known) return absl::InvalidArgumentError(absl::StrCat(path, ": not an original-naming adapter key: ", key));
  }
  std::map<std::string, LoraWeights> by_original;
  for (auto& [module, tensors] : parts) {
    const bool lora = tensors.count(kPartA) || tensors.count(kPartB) || tensors.count(kPartDoraScale);
    if (lora) {
      ASSIGN_OR_RETURN(by_original[module], LoraFromParts(path, module, std::move(tensors)));
    } else {
      ASSIGN_OR_RETURN(by_original[module], LycorisAdapterFromParts(path, module, std::move(tensors)));
    }
  }
  return ToDiffusersModules(std::move(by_original), naming, path);
}

absl::StatusOr<std::map<std::string, LoraWeights>> AdaptersFromParameters(
    const std::map<std::string, at::Tensor>& params, double scale) {
  std::map<std::string, std::map<std::string, at::Tensor>> parts;
  for (const auto& [name, t] : params) {
    const std::string module = AdapterModuleOf(name);
    parts[module][name.substr(module.size() + 1)] = t;
  }
  std::map<std::string, LoraWeights> out;
  for (auto& [module, tensors] : parts) {
    const bool lora = tensors.count(kPartA) || tensors.count(kPartB);
    if (lora) {
      std::map<std::string, at::Tensor> original = tensors;
      auto magnitude = original.extract(kPartMagnitude);
      if (!magnitude.empty()) original[kPartDoraScale] = magnitude.mapped();
      ASSIGN_OR_RETURN(out[module], LoraFromParts("the adapters", module, std::move(original)));
    } else {
      ASSIGN_OR_RETURN(out[module], LycorisAdapterFromParts("the adapters", module, std::move(tensors)));
    }
    out[module].scale = scale;
  }
  return out;
}

bool HasAdapterVariantKeys(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    for (const char* marker : {".dora_scale", ".lora_magnitude_vector", ".hada_", ".lokr_"}) {
      if (absl::StrContains(key, marker)) return true;
    }
  }
  return false;
}

}  // namespace baton
