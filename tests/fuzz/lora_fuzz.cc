// Fuzz target: the LoRA file reader (core/lora/lora.h LoadLoraFile, core/train/init_lora.h LoadInitLora). The
// input is a safetensors file in PEFT, diffusers, BFL or LyCORIS naming. Whatever LoadLoraFile accepts is a set of
// matrices (A [r, in], B [out, r]) with a finite scale, and attaching it to the tiny FLUX.2 model
// (core/testing/tiny_flux2.h; `baton forward --lora`) or starting a job from it (`init_lora`, rank 2,
// attention targets) succeeds or fails with an error: never a crash, never a tensor of another shape.
#include <cmath>

#include "core/lora/lora.h"
#include "core/model/flux2_model.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/init_lora.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"

namespace baton::fuzz {
namespace {

const Flux2Config& Config() {
  static const Flux2Config config = test_util::TinyFlux2Config();
  return config;
}

LoraSpec Spec() {
  const absl::StatusOr<std::vector<std::string>> targets = ResolveLoraTargets("attention");
  Require(targets.ok(), "resolving the attention targets");
  return {2, 2.0, *targets, 0.0, 3};
}

// The seeded adapters of a job with Spec() on the tiny model: the names and shapes an init_lora must match.
const std::map<std::string, at::Tensor>& Seeded() {
  static const std::map<std::string, at::Tensor> seeded = [] {
    Flux2Stage stage(Config(), Flux2StageRange::Full(Config()), at::TensorOptions());
    Require(AttachLora(*stage, Spec()).ok(), "attaching the seeded LoRA");
    std::map<std::string, at::Tensor> out;
    for (auto& [name, p] : LoraParameters(*stage)) out[name] = p.detach().clone();
    return out;
  }();
  return seeded;
}

}  // namespace

bool RunLora(const uint8_t* data, size_t size) {
  const std::string path = ScratchFile(data, size);
  absl::StatusOr<std::map<std::string, LoraWeights>> weights = LoadLoraFile(path);
  bool accepted = weights.ok();
  if (accepted) {
    for (const auto& [module, w] : *weights) {
      if (w.type == AdapterType::kLoha || w.type == AdapterType::kLokr) {
        Require(!w.A.defined() && !w.B.defined() && !w.other.empty(), "LoHa and LoKr carry their factors alone");
        for (const auto& [name, t] : w.other) Require(t.dim() == 2, "LoHa and LoKr factors are matrices");
        continue;
      }
      Require(w.A.dim() == 2 && w.B.dim() == 2 && w.B.size(1) == w.A.size(0), "A is [r, in] and B is [out, r]");
      if (w.type == AdapterType::kDora) Require(w.other.at("lora_magnitude_vector").defined(), "DoRA has a magnitude");
      Require(std::isfinite(w.scale), "the scale is finite");
    }
    Flux2Stage stage(Config(), Flux2StageRange::Full(Config()), at::TensorOptions());
    absl::StatusOr<int> attached = AttachLoraWeights(*stage, *weights);
    if (attached.ok()) Require(*attached == static_cast<int>(weights->size()), "every module attaches");
  }
  absl::StatusOr<std::map<std::string, at::Tensor>> init = LoadInitLora(path, Spec(), Seeded());
  if (init.ok()) {
    Require(init->size() == Seeded().size(), "init_lora gives every adapter");
    for (const auto& [name, t] : Seeded()) {
      auto it = init->find(name);
      Require(it != init->end() && it->second.sizes() == t.sizes() && it->second.scalar_type() == at::kFloat,
              "init_lora keeps the job's names, shapes and fp32");
    }
  }
  return accepted;
}

}  // namespace baton::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  baton::fuzz::RunLora(data, size);
  return 0;
}
