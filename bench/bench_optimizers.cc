// The optimizer recipes side by side (issue 46's bench): each recipe's step time and state memory against plain
// AdamW, in one run, on the adapters of FLUX.2-dev blocks at a given rank (the shapes of the real model's Linears:
// D = 6144, feed-forward 18432; a double block's 10 and a single block's 2 adapted Linears). The step is
// Optimizer::Step (core/train/optimizer.h) exactly as the trainers call it, on random fp32 gradients, on the CPU
// (or --device); state memory is the bytes of its state (StateDict, the step count and Prodigy's scalars aside) per
// byte of adapters.
//
//   bench_optimizers [--double=1] [--single=2] [--rank=16] [--steps=5] [--threads=2] [--device=cpu]
#include <ATen/Parallel.h>
#include <absl/flags/flag.h>
#include <absl/strings/str_format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/bench_flags.h"
#include "core/train/optimizer.h"

ABSL_FLAG(int, double, 1, "FLUX.2-dev double blocks whose adapters are stepped");
ABSL_FLAG(int, single, 2, "FLUX.2-dev single blocks whose adapters are stepped");
ABSL_FLAG(int, rank, 16, "LoRA rank");
ABSL_FLAG(int, steps, 5, "timed steps per recipe (after one untimed)");
ABSL_FLAG(int, threads, 2, "intra-op threads");
ABSL_FLAG(std::string, device, "cpu", "where the adapters and the state live");

namespace baton {
namespace {

constexpr int64_t kDim = 6144, kFf = 18432;

// (module, in, out) of the adapted Linears of FLUX.2-dev's blocks (all-linear targets).
std::vector<std::tuple<std::string, int64_t, int64_t>> Linears(int doubles, int singles) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> out;
  for (int b = 0; b < doubles; ++b) {
    const std::string p = absl::StrFormat("transformer_blocks.%d.", b);
    for (const char* m : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj",
                          "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out"}) {
      out.emplace_back(p + m, kDim, kDim);
    }
    out.emplace_back(p + "ff.linear_in", kDim, 2 * kFf);
    out.emplace_back(p + "ff.linear_out", kFf, kDim);
    out.emplace_back(p + "ff_context.linear_in", kDim, 2 * kFf);
    out.emplace_back(p + "ff_context.linear_out", kFf, kDim);
  }
  for (int b = 0; b < singles; ++b) {
    const std::string p = absl::StrFormat("single_transformer_blocks.%d.attn.", b);
    out.emplace_back(p + "to_qkv_mlp_proj", kDim, 3 * kDim + 2 * kFf);
    out.emplace_back(p + "to_out", kDim + kFf, kDim);
  }
  return out;
}

struct Recipe {
  std::string name;
  OptimizerConfig config;
};

std::vector<Recipe> Recipes() {
  std::vector<Recipe> out;
  OptimizerConfig adamw;
  adamw.lr = 1e-4;
  out.push_back({"adamw", adamw});
  OptimizerConfig adamw8bit = adamw;
  adamw8bit.type = "adamw8bit";
  out.push_back({"adamw8bit", adamw8bit});
  OptimizerConfig plus = adamw;
  plus.plus_ratio = 16;
  out.push_back({"adamw + lora+ 16", plus});
  OptimizerConfig ema = adamw;
  ema.ema.decay = 0.999;
  out.push_back({"adamw + ema", ema});
  OptimizerConfig adafactor = adamw;
  adafactor.type = "adafactor";
  out.push_back({"adafactor (relative step)", adafactor});
  OptimizerConfig adafactor_m = adafactor;
  adafactor_m.adafactor.relative_step = false;
  adafactor_m.adafactor.beta1 = 0.9;
  out.push_back({"adafactor, beta1 0.9", adafactor_m});
  OptimizerConfig prodigy = adamw;
  prodigy.type = "prodigy";
  prodigy.lr = 1;
  out.push_back({"prodigy", prodigy});
  return out;
}

int Run() {
  if (absl::GetFlag(FLAGS_steps) < 1) BenchDie("--steps must be at least 1");
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const at::Device device(absl::GetFlag(FLAGS_device));
  const int64_t rank = absl::GetFlag(FLAGS_rank);
  const auto options = at::TensorOptions(at::kFloat).device(device);
  std::map<std::string, at::Tensor> init, grads;
  int64_t param_bytes = 0;
  for (const auto& [module, in, out] : Linears(absl::GetFlag(FLAGS_double), absl::GetFlag(FLAGS_single))) {
    init[module + ".lora_A.weight"] = at::randn({rank, in}, options) * 0.01;
    init[module + ".lora_B.weight"] = at::randn({out, rank}, options) * 0.01;
  }
  for (const auto& [name, p] : init) {
    grads[name] = at::randn_like(p) * 1e-3;
    param_bytes += static_cast<int64_t>(p.nbytes());
  }
  std::printf(
      "bench_optimizers: %zu adapters of %d double + %d single FLUX.2-dev blocks at rank %lld (%.1f MB "
      "fp32), %d steps each on %s, %d threads\n\n",
      init.size(), absl::GetFlag(FLAGS_double), absl::GetFlag(FLAGS_single), static_cast<long long>(rank),
      static_cast<double>(param_bytes) / 1e6, absl::GetFlag(FLAGS_steps), device.str().c_str(),
      absl::GetFlag(FLAGS_threads));
  std::printf("%-28s %12s %9s %14s %9s\n", "recipe", "step ms", "vs adamw", "state B/param B", "vs adamw");
  double base_ms = 0, base_state = 0;
  for (const Recipe& recipe : Recipes()) {
    std::map<std::string, at::Tensor> params;
    for (const auto& [name, p] : init) params[name] = p.clone();
    Optimizer optimizer(recipe.config);
    if (!optimizer.Step(params, grads, recipe.config.lr).ok()) return 1;  // the state made, untimed
    const int steps = absl::GetFlag(FLAGS_steps);
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < steps; ++k) {
      if (!optimizer.Step(params, grads, recipe.config.lr).ok()) return 1;
    }
    (void)params.begin()->second.sum().item<float>();  // the device's queue drained
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
    int64_t state_bytes = 0;
    for (const auto& [key, t] : optimizer.StateDict()) {
      if (!StateParam(key).empty()) state_bytes += static_cast<int64_t>(t.nbytes());
    }
    const double state = static_cast<double>(state_bytes) / static_cast<double>(param_bytes);
    if (recipe.name == "adamw") base_ms = ms, base_state = state;
    std::printf("%-28s %12.1f %8.2fx %14.3f %8.2fx\n", recipe.name.c_str(), ms, ms / base_ms, state,
                state / base_state);
  }
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (absl::Status s = baton::ParseBenchFlags(argc, argv,
                                              "bench_optimizers [--double=1] [--single=2] [--rank=16] [--steps=5] "
                                              "[--threads=2] [--device=cpu]");
      !s.ok()) {
    baton::BenchDie(std::string(s.message()));
  }
  return baton::Run();
}
