#include "core/keys/flux2_keys.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>
#include <absl/strings/str_split.h>
#include <absl/types/span.h>

#include <cstdlib>

namespace baton {
namespace {

struct Rule {
  const char* diffusers;  // suffix after "<prefix>.N." (or the whole name for model-level entries)
  const char* bfl;
  int chunk;
  int num_chunks;
  bool swap;
};

// Model-level entries (no block index). Names are module paths; ".weight" is appended by callers.
constexpr Rule kModelRules[] = {
    {"x_embedder", "img_in", 0, 1, false},
    {"context_embedder", "txt_in", 0, 1, false},
    {"time_guidance_embed.timestep_embedder.linear_1", "time_in.in_layer", 0, 1, false},
    {"time_guidance_embed.timestep_embedder.linear_2", "time_in.out_layer", 0, 1, false},
    {"time_guidance_embed.guidance_embedder.linear_1", "guidance_in.in_layer", 0, 1, false},
    {"time_guidance_embed.guidance_embedder.linear_2", "guidance_in.out_layer", 0, 1, false},
    {"double_stream_modulation_img.linear", "double_stream_modulation_img.lin", 0, 1, false},
    {"double_stream_modulation_txt.linear", "double_stream_modulation_txt.lin", 0, 1, false},
    {"single_stream_modulation.linear", "single_stream_modulation.lin", 0, 1, false},
    {"norm_out.linear", "final_layer.adaLN_modulation.1", 0, 1, true},
    {"proj_out", "final_layer.linear", 0, 1, false},
};

constexpr Rule kDoubleRules[] = {
    {"attn.to_q", "img_attn.qkv", 0, 3, false},         {"attn.to_k", "img_attn.qkv", 1, 3, false},
    {"attn.to_v", "img_attn.qkv", 2, 3, false},         {"attn.add_q_proj", "txt_attn.qkv", 0, 3, false},
    {"attn.add_k_proj", "txt_attn.qkv", 1, 3, false},   {"attn.add_v_proj", "txt_attn.qkv", 2, 3, false},
    {"attn.to_out.0", "img_attn.proj", 0, 1, false},    {"attn.to_add_out", "txt_attn.proj", 0, 1, false},
    {"ff.linear_in", "img_mlp.0", 0, 1, false},         {"ff.linear_out", "img_mlp.2", 0, 1, false},
    {"ff_context.linear_in", "txt_mlp.0", 0, 1, false}, {"ff_context.linear_out", "txt_mlp.2", 0, 1, false},
};

constexpr Rule kSingleRules[] = {
    {"attn.to_qkv_mlp_proj", "linear1", 0, 1, false},
    {"attn.to_out", "linear2", 0, 1, false},
};

// RMSNorm scales: diffusers "<x>.weight" ↔ BFL "<y>.scale".
constexpr Rule kDoubleNormRules[] = {
    {"attn.norm_q", "img_attn.norm.query_norm", 0, 1, false},
    {"attn.norm_k", "img_attn.norm.key_norm", 0, 1, false},
    {"attn.norm_added_q", "txt_attn.norm.query_norm", 0, 1, false},
    {"attn.norm_added_k", "txt_attn.norm.key_norm", 0, 1, false},
};
constexpr Rule kSingleNormRules[] = {
    {"attn.norm_q", "norm.query_norm", 0, 1, false},
    {"attn.norm_k", "norm.key_norm", 0, 1, false},
};

// Splits "prefix.N.rest" → (N, rest). Returns false if `name` does not start with "prefix.<int>.".
bool SplitBlock(const std::string& name, const std::string& prefix, int* index, std::string* rest) {
  if (!absl::StartsWith(name, prefix + ".")) return false;
  std::string tail = name.substr(prefix.size() + 1);
  auto dot = tail.find('.');
  if (dot == std::string::npos || dot == 0) return false;
  for (size_t i = 0; i < dot; ++i) {
    if (tail[i] < '0' || tail[i] > '9') return false;
  }
  *index = std::atoi(tail.substr(0, dot).c_str());
  *rest = tail.substr(dot + 1);
  return true;
}

// Strips a known parameter suffix; returns the module path and the suffix ("" for module names).
std::pair<std::string, std::string> SplitSuffix(const std::string& key) {
  for (const char* s : {".weight", ".scale"}) {
    if (absl::EndsWith(key, s)) return {key.substr(0, key.size() - std::string(s).size()), s};
  }
  return {key, ""};
}

}  // namespace

std::optional<BflLocation> DiffusersToBfl(const std::string& diffusers_key) {
  // The lambda captures a plain reference: clang 14 (the fuzz build) cannot capture a structured binding.
  const auto [module, suffix_] = SplitSuffix(diffusers_key);
  const std::string& suffix = suffix_;
  auto make = [&](const std::string& bfl_module, const Rule& r, bool norm) {
    std::string bfl_suffix = suffix.empty() ? "" : (norm ? ".scale" : ".weight");
    return BflLocation{bfl_module + bfl_suffix, r.chunk, r.num_chunks, r.swap};
  };
  for (const Rule& r : kModelRules) {
    if (module == r.diffusers) return make(r.bfl, r, false);
  }
  int n;
  std::string rest;
  if (SplitBlock(module, "transformer_blocks", &n, &rest)) {
    std::string base = absl::StrCat("double_blocks.", n, ".");
    for (const Rule& r : kDoubleRules)
      if (rest == r.diffusers) return make(base + r.bfl, r, false);
    for (const Rule& r : kDoubleNormRules)
      if (rest == r.diffusers) return make(base + r.bfl, r, true);
  } else if (SplitBlock(module, "single_transformer_blocks", &n, &rest)) {
    std::string base = absl::StrCat("single_blocks.", n, ".");
    for (const Rule& r : kSingleRules)
      if (rest == r.diffusers) return make(base + r.bfl, r, false);
    for (const Rule& r : kSingleNormRules)
      if (rest == r.diffusers) return make(base + r.bfl, r, true);
  }
  return std::nullopt;
}

std::vector<std::string> Flux2FusedLeaves() {
  std::vector<std::string> leaves;
  for (const Rule& r : kDoubleRules) {
    if (r.num_chunks > 1) leaves.push_back(r.diffusers);
  }
  return leaves;
}

std::vector<std::string> BflToDiffusers(const std::string& bfl_key) {
  const auto [module, suffix_] = SplitSuffix(bfl_key);
  const std::string& suffix = suffix_;  // captured below (see DiffusersToBfl)
  std::vector<std::string> out;
  auto add = [&](const std::string& d, bool norm) {
    out.push_back(suffix.empty() ? d : d + ".weight");
    (void)norm;
  };
  for (const Rule& r : kModelRules) {
    if (module == r.bfl) add(r.diffusers, false);
  }
  int n;
  std::string rest;
  if (SplitBlock(module, "double_blocks", &n, &rest)) {
    std::string base = absl::StrCat("transformer_blocks.", n, ".");
    for (const Rule& r : kDoubleRules)
      if (rest == r.bfl) add(base + r.diffusers, false);
    for (const Rule& r : kDoubleNormRules)
      if (rest == r.bfl) add(base + r.diffusers, true);
  } else if (SplitBlock(module, "single_blocks", &n, &rest)) {
    std::string base = absl::StrCat("single_transformer_blocks.", n, ".");
    for (const Rule& r : kSingleRules)
      if (rest == r.bfl) add(base + r.diffusers, false);
    for (const Rule& r : kSingleNormRules)
      if (rest == r.bfl) add(base + r.diffusers, true);
  }
  return out;
}

std::optional<std::string> Flux2ModuleFromUnderscored(absl::string_view name) {
  auto underscored = [](absl::string_view s) { return absl::StrReplaceAll(s, {{".", "_"}}); };
  for (const Rule& r : kModelRules) {
    if (name == underscored(r.diffusers)) return std::string(r.diffusers);
  }
  auto in_blocks = [&](absl::string_view prefix, absl::Span<const Rule> rules) -> std::optional<std::string> {
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, prefix) || !absl::ConsumePrefix(&rest, "_")) return std::nullopt;
    const size_t end = rest.find('_');
    int index;
    if (end == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, end), &index) || index < 0) {
      return std::nullopt;
    }
    for (const Rule& r : rules) {
      if (rest.substr(end + 1) == underscored(r.diffusers)) return absl::StrCat(prefix, ".", index, ".", r.diffusers);
    }
    return std::nullopt;
  };
  if (auto module = in_blocks("transformer_blocks", kDoubleRules)) return module;
  return in_blocks("single_transformer_blocks", kSingleRules);
}

at::Tensor SwapHalves(const at::Tensor& t) {
  auto halves = t.chunk(2, 0);
  return at::cat({halves[1], halves[0]}, 0);
}

absl::StatusOr<std::map<std::string, at::Tensor>> DiffusersToBflStateDict(
    const std::map<std::string, at::Tensor>& diffusers) {
  std::map<std::string, std::vector<at::Tensor>> parts;
  std::map<std::string, BflLocation> locs;
  std::vector<std::string> unknown;
  for (const auto& [key, tensor] : diffusers) {
    auto loc = DiffusersToBfl(key);
    if (!loc) {
      unknown.push_back(key);
      continue;
    }
    auto& slot = parts[loc->key];
    slot.resize(loc->num_chunks);
    slot[loc->chunk] = loc->swap_halves ? SwapHalves(tensor) : tensor;
    locs[loc->key] = *loc;
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no BFL name for: ", absl::StrJoin(unknown, ", ")));
  }
  std::map<std::string, at::Tensor> out;
  for (auto& [key, chunks] : parts) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (!chunks[i].defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot fuse ", key, ": chunk ", i, " of ", chunks.size(), " is missing"));
      }
    }
    out[key] = chunks.size() == 1 ? chunks[0] : at::cat(chunks, 0);
  }
  return out;
}

absl::StatusOr<std::map<std::string, at::Tensor>> BflToDiffusersStateDict(
    const std::map<std::string, at::Tensor>& bfl) {
  std::map<std::string, at::Tensor> out;
  std::vector<std::string> unknown;
  for (const auto& [key, tensor] : bfl) {
    auto names = BflToDiffusers(key);
    if (names.empty()) {
      unknown.push_back(key);
      continue;
    }
    if (names.size() == 1) {
      auto loc = DiffusersToBfl(names[0]);
      out[names[0]] = loc && loc->swap_halves ? SwapHalves(tensor) : tensor;
      continue;
    }
    auto chunks = tensor.chunk(static_cast<int64_t>(names.size()), 0);
    for (size_t i = 0; i < names.size(); ++i) out[names[i]] = chunks[i].contiguous();
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no diffusers name for: ", absl::StrJoin(unknown, ", ")));
  }
  return out;
}

}  // namespace baton
