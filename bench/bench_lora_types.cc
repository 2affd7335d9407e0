// The LoRA types side by side (issue 46's bench): each type's forward + backward time and its adapters' and AdamW
// state's memory against plain LoRA, in one run, on the Linears of one FLUX.2-dev double block (D = 6144, feed-forward
// 18432: 8 attention Linears and both streams' feed-forwards, all-linear) at a given rank and token count. Each Linear
// is a LoraLinear (core/lora/lora_linear.h) exactly as the stages build it, fp32 frozen weights, on the CPU (or
// --device); the backward is the adapters' (the frozen weights get no gradient), the input's gradient included.
//
//   bench_lora_types [--rank=16] [--tokens=256] [--steps=2] [--threads=2] [--factor=-1] [--device=cpu]
#include <ATen/Parallel.h>
#include <absl/flags/flag.h>
#include <absl/strings/str_format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_flags.h"
#include "core/lora/lora_linear.h"

ABSL_FLAG(int, rank, 16, "adapter rank");
ABSL_FLAG(int, tokens, 256, "tokens through each Linear");
ABSL_FLAG(int, steps, 2, "timed forward + backward passes per type (after one untimed)");
ABSL_FLAG(int, threads, 2, "intra-op threads");
ABSL_FLAG(int, factor, -1, "LoKr's factor");
ABSL_FLAG(std::string, device, "cpu", "where the weights, adapters and activations live");

namespace baton {
namespace {

constexpr int64_t kDim = 6144, kFf = 18432;

// (in, out) of one FLUX.2-dev double block's Linears (all-linear targets).
std::vector<std::pair<int64_t, int64_t>> DoubleBlockLinears() {
  std::vector<std::pair<int64_t, int64_t>> out(8, {kDim, kDim});
  for (int stream = 0; stream < 2; ++stream) {
    out.emplace_back(kDim, 2 * kFf);
    out.emplace_back(kFf, kDim);
  }
  return out;
}

struct TypeFigures {
  double ms = 0;
  int64_t adapter_values = 0;
};

TypeFigures Measure(AdapterType type, std::vector<LoraLinear>& linears, const std::vector<at::Tensor>& inputs) {
  TypeFigures f;
  for (LoraLinear& l : linears) {
    l->AttachAdapter(type, absl::GetFlag(FLAGS_rank), absl::GetFlag(FLAGS_rank), 0.0, absl::GetFlag(FLAGS_factor), 1);
    for (const auto& [name, p] : l->adapter_parameters()) f.adapter_values += p.numel();
  }
  auto pass = [&] {
    for (size_t i = 0; i < linears.size(); ++i) {
      at::Tensor y = linears[i]->forward(inputs[i]);
      y.sum().backward();
    }
  };
  pass();  // untimed: the allocator's first blocks
  const int steps = absl::GetFlag(FLAGS_steps);
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < steps; ++k) pass();
  (void)inputs[0].grad().sum().item<float>();  // the device's queue drained
  f.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  return f;
}

int Run() {
  if (absl::GetFlag(FLAGS_steps) < 1) BenchDie("--steps must be at least 1");
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const at::Device device(absl::GetFlag(FLAGS_device));
  const auto options = at::TensorOptions(at::kFloat).device(device);
  std::printf(
      "bench_lora_types: one FLUX.2-dev double block's 12 Linears, rank %d, %d tokens, fp32, %d passes each on "
      "%s, %d threads\n\n",
      absl::GetFlag(FLAGS_rank), absl::GetFlag(FLAGS_tokens), absl::GetFlag(FLAGS_steps), device.str().c_str(),
      absl::GetFlag(FLAGS_threads));
  std::printf("%-6s %10s %14s %8s %16s %8s\n", "type", "params M", "fwd+bwd ms", "vs lora", "adapters+AdamW MB",
              "vs lora");
  TypeFigures lora;
  for (AdapterType type : {AdapterType::kLora, AdapterType::kDora, AdapterType::kLoha, AdapterType::kLokr}) {
    std::vector<LoraLinear> linears;
    std::vector<at::Tensor> inputs;
    for (const auto& [in, out] : DoubleBlockLinears()) {
      linears.emplace_back(in, out, options);
      at::NoGradGuard no_grad;
      linears.back()->weight.normal_(0, 1.0 / std::sqrt(static_cast<double>(in)));
      inputs.push_back(at::randn({absl::GetFlag(FLAGS_tokens), in}, options).requires_grad_(true));
    }
    const TypeFigures f = Measure(type, linears, inputs);
    if (type == AdapterType::kLora) lora = f;
    // fp32 adapters, their gradients and AdamW's two moments: 16 bytes per value.
    const double mb = static_cast<double>(f.adapter_values) * 16 / 1e6,
                 lora_mb = static_cast<double>(lora.adapter_values) * 16 / 1e6;
    std::printf("%-6s %10.2f %14.1f %7.2fx %16.1f %7.2fx\n", AdapterTypeName(type),
                static_cast<double>(f.adapter_values) / 1e6, f.ms, f.ms / lora.ms, mb, mb / lora_mb);
  }
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (absl::Status s = baton::ParseBenchFlags(
          argc, argv,
          "bench_lora_types [--rank=16] [--tokens=256] [--steps=2] [--threads=2] [--factor=-1] [--device=cpu]");
      !s.ok()) {
    baton::BenchDie(std::string(s.message()));
  }
  return baton::Run();
}
