#include "core/lora/adapter_file.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>

#include <cmath>
#include <set>

#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kLycorisPrefix[] = "lycoris_";

// PEFT name → (module, parameter) for the factor names of LoHa and LoKr (no dots in the parameter).
std::pair<std::string, std::string> SplitFactorName(const std::string& name) {
  const size_t dot = name.rfind('.');
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

absl::StatusOr<LoraWeights> LycorisAdapterFromParts(const std::string& path, const std::string& module,
                                                    std::map<std::string, at::Tensor> parts) {
  LoraWeights w;
  at::Tensor alpha;
  if (parts.count("alpha")) {
    alpha = parts["alpha"];
    parts.erase("alpha");
  }
  for (const auto& [name, t] : parts) {
    if (t.dim() != 2 || t.numel() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": LyCORIS module ", module, ".", name, " is ",
                                                     ShapeString(t.sizes()), ", not a non-empty matrix"));
    }
  }
  int64_t rank = 0;
  bool full = false;
  if (parts.count("hada_w1_a")) {
    w.type = AdapterType::kLoha;
    for (const char* n : {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"}) {
      if (!parts.count(n)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": LoHa module ", module, " lacks ", n));
      }
    }
    rank = parts["hada_w1_b"].size(0);
  } else if (parts.count("lokr_w1")) {
    w.type = AdapterType::kLokr;
    full = parts.count("lokr_w2") > 0;
    if (!full && (!parts.count("lokr_w2_a") || !parts.count("lokr_w2_b"))) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": LoKr module ", module, " lacks lokr_w2 or lokr_w2_a/_b"));
    }
    rank = full ? 0 : parts["lokr_w2_a"].size(1);
  } else {
    std::vector<std::string> names;
    for (const auto& [n, t] : parts) names.push_back(n);
    return absl::InvalidArgumentError(absl::StrCat(path, ": LyCORIS module ", module,
                                                   " is neither LoHa (hada_w1_a, ...) nor LoKr with a full w1 "
                                                   "(lokr_w1, ...): it has ",
                                                   absl::StrJoin(names, ", ")));
  }
  for (const auto& [name, t] : parts) {
    const std::set<std::string> known =
        w.type == AdapterType::kLoha ? std::set<std::string>{"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"}
                                     : std::set<std::string>{"lokr_w1", full ? "lokr_w2" : "lokr_w2_a", "lokr_w2_b"};
    if (!known.count(name) || (full && name == "lokr_w2_b")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": LyCORIS module ", module, " has ", name,
                                                     ", which Baton's ", AdapterTypeName(w.type),
                                                     " does not have (Tucker factors, DoRA scales and split LoKr w1 "
                                                     "are not built)"));
    }
  }
  w.scale = 1.0;  // LyCORIS: no alpha, or a LoKr of two full factors, applies scale 1
  if (alpha.defined() && !full && rank > 0) {
    const double a = alpha.numel() == 1 ? alpha.item<double>() : std::nan("");
    if (!std::isfinite(a)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", module, ".alpha must be one finite number"));
    }
    w.scale = a / static_cast<double>(rank);
  }
  w.other = std::move(parts);
  return w;
}

const char* LinearFactorName(AdapterType type) {
  switch (type) {
    case AdapterType::kLoha:
      return "hada_w1_a";
    case AdapterType::kLokr:
      return "lokr_w1";
    default:
      return "lora_B.weight";
  }
}

std::string LycorisModuleName(const std::string& module) {
  return absl::StrCat(kLycorisPrefix, absl::StrReplaceAll(module, {{".", "_"}}));
}

absl::Status SaveLycoris(const std::string& path, const std::map<std::string, at::Tensor>& params, const LoraSpec& spec,
                         const std::map<std::string, std::string>& metadata) {
  if (spec.type != AdapterType::kLoha && spec.type != AdapterType::kLokr) {
    return absl::InvalidArgumentError(
        absl::StrCat("LyCORIS files hold loha or lokr, not ", AdapterTypeName(spec.type)));
  }
  std::map<std::string, LoraWeights> adapters;
  for (const auto& [name, t] : params) {
    auto [module, param] = SplitFactorName(name);
    LoraWeights& w = adapters[module];
    w.type = spec.type;
    w.scale = spec.alpha / static_cast<double>(spec.rank);
    w.other[param] = t;
  }
  std::map<std::string, std::string> meta = metadata;
  meta["baton_lora_type"] = AdapterTypeName(spec.type);
  return SaveLycorisAdapters(path, adapters, meta);
}

LoraWeights WithScaleFolded(const LoraWeights& w) {
  auto host = [](const at::Tensor& t) { return t.detach().to(at::kFloat).cpu().contiguous(); };
  LoraWeights out;
  out.type = w.type;
  if (w.A.defined()) out.A = host(w.A);
  if (w.B.defined()) out.B = host(w.B);
  for (const auto& [name, t] : w.other) out.other[name] = host(t);
  if (w.scale != 1.0) {
    const std::string linear = LinearFactorName(w.type);
    at::Tensor& factor = linear == "lora_B.weight" ? out.B : out.other[linear];
    factor = factor * w.scale;
  }
  return out;
}

at::Tensor LycorisAlpha(const LoraWeights& w) {
  auto size = [&](const char* name, int dim) { return w.other.count(name) ? w.other.at(name).size(dim) : 0; };
  const int64_t rank = w.type == AdapterType::kLoha ? size("hada_w1_b", 0) : size("lokr_w2_a", 1);
  return at::scalar_tensor(static_cast<double>(rank > 0 ? rank : 1), at::kFloat);
}

absl::Status SaveLycorisAdapters(const std::string& path, const std::map<std::string, LoraWeights>& adapters,
                                 const std::map<std::string, std::string>& metadata) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [module, w] : adapters) {
    if (w.type != AdapterType::kLoha && w.type != AdapterType::kLokr) {
      return absl::InvalidArgumentError(
          absl::StrCat("LyCORIS files hold loha or lokr: ", module, " is ", AdapterTypeName(w.type)));
    }
    const std::string base = LycorisModuleName(module);
    for (const auto& [name, t] : WithScaleFolded(w).other) out[base + "." + name] = t;
    out[base + ".alpha"] = LycorisAlpha(w);
  }
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  return WriteSafetensors(path, out, meta);
}

bool IsLycorisFile(const std::map<std::string, at::Tensor>& raw) {
  return !raw.empty() && absl::StartsWith(raw.begin()->first, kLycorisPrefix);
}

absl::StatusOr<std::map<std::string, LoraWeights>> LycorisAdapters(const std::string& path,
                                                                   const std::map<std::string, at::Tensor>& raw) {
  std::map<std::string, std::map<std::string, at::Tensor>> by_module;
  for (const auto& [key, t] : raw) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos || !absl::StartsWith(key, kLycorisPrefix)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a LyCORIS key: ", key));
    }
    by_module[key.substr(0, dot)][key.substr(dot + 1)] = t;
  }
  std::map<std::string, LoraWeights> out;
  for (auto& [module, parts] : by_module) {
    ASSIGN_OR_RETURN(out[module], LycorisAdapterFromParts(path, module, std::move(parts)));
  }
  return out;
}

absl::StatusOr<std::map<std::string, LoraWeights>> ResolveLycorisNames(std::map<std::string, LoraWeights> weights,
                                                                       const std::vector<std::string>& modules) {
  std::map<std::string, std::string> by_lycoris;
  for (const auto& m : modules) by_lycoris[LycorisModuleName(m)] = m;
  std::map<std::string, LoraWeights> out;
  std::vector<std::string> unknown;
  for (auto& [name, w] : weights) {
    if (!absl::StartsWith(name, kLycorisPrefix)) {
      out[name] = std::move(w);
      continue;
    }
    auto it = by_lycoris.find(name);
    if (it == by_lycoris.end()) {
      unknown.push_back(name);
    } else {
      out[it->second] = std::move(w);
    }
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LyCORIS modules that name no Linear of the model: ", absl::StrJoin(unknown, ", ")));
  }
  return out;
}

}  // namespace baton
