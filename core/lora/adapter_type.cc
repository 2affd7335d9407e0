#include "core/lora/adapter_type.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cstring>

namespace baton {

absl::StatusOr<AdapterType> ParseAdapterType(const std::string& name) {
  if (name == "lora") return AdapterType::kLora;
  if (name == "dora") return AdapterType::kDora;
  if (name == "loha") return AdapterType::kLoha;
  if (name == "lokr") return AdapterType::kLokr;
  return absl::InvalidArgumentError(absl::StrCat("unknown LoRA type '", name, "' (want lora, dora, loha or lokr)"));
}

const char* AdapterTypeName(AdapterType type) {
  switch (type) {
    case AdapterType::kLora:
      return "lora";
    case AdapterType::kDora:
      return "dora";
    case AdapterType::kLoha:
      return "loha";
    case AdapterType::kLokr:
      return "lokr";
  }
  return "?";
}

const char* AdapterDisplayName(AdapterType type) {
  switch (type) {
    case AdapterType::kLora:
      return "LoRA";
    case AdapterType::kDora:
      return "DoRA";
    case AdapterType::kLoha:
      return "LoHa";
    case AdapterType::kLokr:
      return "LoKr";
  }
  return "?";
}

std::pair<int64_t, int64_t> LokrFactorization(int64_t dim, int64_t factor) {
  if (factor > 0 && dim % factor == 0) return {factor, dim / factor};
  if (factor == -1) factor = dim;
  int64_t m = 1, n = dim;
  const int64_t length = m + n;
  while (m < n) {
    int64_t new_m = m + 1;
    while (dim % new_m != 0) ++new_m;
    const int64_t new_n = dim / new_m;
    if (new_m + new_n > length || new_m > factor) break;
    m = new_m;
    n = new_n;
  }
  if (m > n) std::swap(m, n);
  return {m, n};
}

LokrShape LokrShapeFor(int64_t in, int64_t out, int64_t rank, int64_t factor) {
  LokrShape s;
  std::tie(s.in_m, s.in_n) = LokrFactorization(in, factor);
  std::tie(s.out_l, s.out_k) = LokrFactorization(out, factor);
  // peft: use_w2 = not (r < max(out_k, in_n) / 2), a float division.
  s.full_w2 = !(static_cast<double>(rank) < static_cast<double>(std::max(s.out_k, s.in_n)) / 2.0);
  return s;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> AdapterParameterShapes(AdapterType type, int64_t in,
                                                                                 int64_t out, int64_t rank,
                                                                                 int64_t lokr_factor) {
  switch (type) {
    case AdapterType::kLora:
      return {{"lora_A.weight", {rank, in}}, {"lora_B.weight", {out, rank}}};
    case AdapterType::kDora:
      return {{"lora_A.weight", {rank, in}}, {"lora_B.weight", {out, rank}}, {"lora_magnitude_vector", {out}}};
    case AdapterType::kLoha:
      return {
          {"hada_w1_a", {out, rank}}, {"hada_w1_b", {rank, in}}, {"hada_w2_a", {out, rank}}, {"hada_w2_b", {rank, in}}};
    case AdapterType::kLokr: {
      const LokrShape s = LokrShapeFor(in, out, rank, lokr_factor);
      if (s.full_w2) return {{"lokr_w1", {s.out_l, s.in_m}}, {"lokr_w2", {s.out_k, s.in_n}}};
      return {{"lokr_w1", {s.out_l, s.in_m}}, {"lokr_w2_a", {s.out_k, rank}}, {"lokr_w2_b", {rank, s.in_n}}};
    }
  }
  return {};
}

int64_t AdapterParameterCount(AdapterType type, int64_t in, int64_t out, int64_t rank, int64_t lokr_factor) {
  int64_t total = 0;
  for (const auto& [name, shape] : AdapterParameterShapes(type, in, out, rank, lokr_factor)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}

std::string AdapterModuleOf(const std::string& name) {
  for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
    if (absl::EndsWith(name, suffix)) return name.substr(0, name.size() - strlen(suffix));
  }
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

bool IsAdapterParameterName(const std::string& name) {
  return absl::StrContains(name, ".lora_A.") || absl::StrContains(name, ".lora_B.") ||
         absl::EndsWith(name, ".lora_magnitude_vector") || absl::StrContains(name, ".hada_w") ||
         absl::StrContains(name, ".lokr_w");
}

}  // namespace baton
