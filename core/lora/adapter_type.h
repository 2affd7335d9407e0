// The adapter types a `lora:` section can train (`type: lora | dora | loha | lokr`), their parameters as PEFT names
// them, and their shapes. Each type's math lives in adapter_math.h; the Linear that carries one is lora_linear.h.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace baton {

// With s = alpha / r for every type:
//   lora: y += s·x·Aᵀ·Bᵀ; lora_A.weight [r, in], lora_B.weight [out, r]
//   dora: y = m/‖W + s·B·A‖ ⊙ (x·Wᵀ + s·x·Aᵀ·Bᵀ), the norm per output row, detached as the paper and peft do;
//         lora_A.weight, lora_B.weight, lora_magnitude_vector [out]
//   loha: ΔW = s·(w1a·w1b) ⊙ (w2a·w2b) (Hadamard product); hada_w1_a, hada_w2_a [out, r], hada_w1_b, hada_w2_b [r, in]
//   lokr: ΔW = s·kron(w1, w2), w2 = w2a·w2b or full (peft's rule); lokr_w1 [out_l, in_m], lokr_w2_a [out_k, r],
//         lokr_w2_b [r, in_n] (or lokr_w2 [out_k, in_n]); out = out_l·out_k, in = in_m·in_n
enum class AdapterType { kLora, kDora, kLoha, kLokr };

absl::StatusOr<AdapterType> ParseAdapterType(const std::string& name);  // "lora" | "dora" | "loha" | "lokr"
const char* AdapterTypeName(AdapterType type);
const char* AdapterDisplayName(AdapterType type);  // "LoRA" | "DoRA" | "LoHa" | "LoKr"

// peft's (and LyCORIS') factorization of a dimension into m ≤ n with m·n = dim: m = `factor` when it divides dim,
// else the pair nearest √dim with m ≤ factor (factor -1: no bound).
std::pair<int64_t, int64_t> LokrFactorization(int64_t dim, int64_t factor);

// One LoKr adapter's factor shapes for a Linear in → out at rank r: w1 is [out_l, in_m] (always full: peft's
// decompose_both off); w2 is [out_k, in_n], full when r ≥ max(out_k, in_n)/2, else w2_a [out_k, r] · w2_b [r, in_n].
struct LokrShape {
  int64_t out_l = 1, out_k = 1, in_m = 1, in_n = 1;
  bool full_w2 = false;
};
LokrShape LokrShapeFor(int64_t in, int64_t out, int64_t rank, int64_t factor);

// The adapter's parameters as (name after the module, shape), in PEFT's names, for a Linear in → out.
std::vector<std::pair<std::string, std::vector<int64_t>>> AdapterParameterShapes(AdapterType type, int64_t in,
                                                                                 int64_t out, int64_t rank,
                                                                                 int64_t lokr_factor);
// The number of trainable values in one adapter (the sum over AdapterParameterShapes).
int64_t AdapterParameterCount(AdapterType type, int64_t in, int64_t out, int64_t rank, int64_t lokr_factor);

// The module of an adapter parameter's name ("x.to_q.lora_A.weight" → "x.to_q", "x.to_q.hada_w1_a" → "x.to_q").
std::string AdapterModuleOf(const std::string& name);

// Whether a module tensor name belongs to an adapter of any type ("....lora_A.weight", "....hada_w1_a", ...).
bool IsAdapterParameterName(const std::string& name);

}  // namespace baton
