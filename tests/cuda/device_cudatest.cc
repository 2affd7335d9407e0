// CUDA placement and numerics of the pieces a CUDA stage is made of, each held to the CPU: a stage's frozen
// weights, LoRA adapters, shell inputs and constants on the device; pinned host buffers both ways; int8/fp8
// dequantization on the device; bf16 attention against fp32. Every test SKIPS without a CUDA device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "core/device/device.h"
#include "core/device/transfer.h"
#include "core/lora/lora.h"
#include "core/model/flux2_ops.h"
#include "core/model/flux2_weights.h"
#include "core/model/model_family.h"
#include "core/quant/quantize_tensor.h"
#include "core/quant/quantized_matmul.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << BuildAndDeviceSummary() << ")";
  }
};

// ‖a − b‖ / ‖b‖ in fp64 on the CPU.
double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.detach().to(at::kCPU, at::kDouble), y = b.detach().to(at::kCPU, at::kDouble);
  return (x - y).norm().item<double>() / std::max(y.norm().item<double>(), 1e-30);
}

struct Built {
  std::unique_ptr<ShellModel> shell;
  std::unique_ptr<StageModel> stage;
};

Built Build(const ModelFamily& model, at::Device device) {
  LoraSpec spec;
  spec.rank = 4;
  spec.alpha = 4;
  spec.targets = *ResolveLoraTargets("all-linear");
  Built b;
  auto shell = model.BuildShell(at::kFloat, device);
  EXPECT_TRUE(shell.ok()) << shell.status();
  auto stage = model.BuildStage(model.FullRange(), at::kFloat, device, &spec, true, WeightQuant::kNone);
  EXPECT_TRUE(stage.ok()) << stage.status();
  if (shell.ok()) b.shell = std::move(*shell);
  if (stage.ok()) b.stage = std::move(*stage);
  // Non-zero adapters (B starts at zero), the same values on both devices, so the LoRA path shows in the outputs.
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  if (b.stage) {
    for (auto& [name, p] : LoraParameters(b.stage->module())) {
      p.copy_(at::randn(p.sizes(), gen, at::kFloat) * 0.05);
    }
  }
  return b;
}

// Forward of the whole tiny model with a loss, backward; returns the output and the LoRA gradients.
std::pair<at::Tensor, std::map<std::string, at::Tensor>> ForwardBackward(Built& b, at::Device device,
                                                                         const test_util::TinyInputs& in) {
  TensorMap inputs = {{"hidden_states", in.hidden_states.to(device)},
                      {"encoder_hidden_states", in.encoder_hidden_states.to(device)},
                      {"timestep", in.timestep.to(device)},
                      {"guidance", in.guidance.to(device)},
                      {"img_ids", in.img_ids.to(device)},
                      {"txt_ids", in.txt_ids.to(device)}};
  auto shell_out = b.shell->Run(inputs, at::kFloat);
  EXPECT_TRUE(shell_out.ok()) << shell_out.status();
  if (!shell_out.ok()) return {};
  for (const auto& [name, t] : shell_out->inputs) EXPECT_EQ(t.device(), device) << "shell input " << name;
  for (const auto& [name, t] : shell_out->constants) EXPECT_EQ(t.device(), device) << "shell constant " << name;
  TensorMap constants = shell_out->constants;
  for (const auto& [name, table] : shell_out->tables) constants[name] = table.to(device);
  at::Tensor out = b.stage->Forward(shell_out->inputs, constants).at("output");
  EXPECT_EQ(out.device(), device);
  out.pow(2).mean().backward();
  std::map<std::string, at::Tensor> grads;
  for (auto& [name, p] : LoraParameters(b.stage->module())) {
    EXPECT_TRUE(p.grad().defined()) << name;
    if (p.grad().defined()) grads[name] = p.grad().to(at::kCPU);
  }
  return {out.detach().to(at::kCPU), grads};
}

// Tolerance: fp32 on both devices (cuBLAS's TF32 is off by default in libtorch); the GPU sums in other orders, so
// outputs differ by reassociation only, ~1e-6 relative; 1e-4 relative catches any real difference (a wrong
// dtype, a missed LoRA, a bf16 path) by orders of magnitude.
TEST_F(CudaTest, StageWeightsLoraAndConstantsLiveOnTheDeviceAndMatchTheCpu) {
  const std::string dir = test_util::MakeTempDir("cuda_stage");
  Flux2Config c = test_util::TinyFlux2Config();
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "model"), 1).ok());
  auto model = OpenModel(JoinPath(dir, "model"));
  ASSERT_TRUE(model.ok()) << model.status();
  Built cpu = Build(**model, at::kCPU), gpu = Build(**model, kCuda);
  ASSERT_TRUE(cpu.stage && gpu.stage && cpu.shell && gpu.shell);
  int64_t lora = 0;
  for (const auto& p : gpu.stage->module().named_parameters(true)) {
    EXPECT_EQ(p.value().device(), kCuda) << p.key();
  }
  for (const auto& b : gpu.stage->module().named_buffers(true)) EXPECT_EQ(b.value().device(), kCuda) << b.key();
  for (const auto& [name, p] : LoraParameters(gpu.stage->module())) {
    EXPECT_EQ(p.device(), kCuda) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
    ++lora;
  }
  EXPECT_GT(lora, 0);
  test_util::TinyInputs in = test_util::MakeTinyInputs(c, 2, 2, 3, 5, 11);
  auto [out_cpu, grads_cpu] = ForwardBackward(cpu, at::kCPU, in);
  auto [out_gpu, grads_gpu] = ForwardBackward(gpu, kCuda, in);
  ASSERT_TRUE(out_cpu.defined() && out_gpu.defined());
  EXPECT_LE(RelativeError(out_gpu, out_cpu), 1e-4);
  ASSERT_EQ(grads_cpu.size(), grads_gpu.size());
  for (const auto& [name, g] : grads_cpu) EXPECT_LE(RelativeError(grads_gpu.at(name), g), 1e-4) << name;
}

TEST_F(CudaTest, PinnedHostBuffersCarryExactBytesBothWays) {
  DeviceTransfer transfer(kCuda);
  EXPECT_TRUE(transfer.wants_pinned_host());
  at::Tensor x = at::randn({513, 77}, at::TensorOptions().device(kCuda));
  DeviceTransfer::PendingDownload down = transfer.DownloadAsync(x);
  ASSERT_TRUE(static_cast<bool>(down.wait));
  down.wait();
  EXPECT_TRUE(down.host.is_pinned());
  EXPECT_EQ(down.host.device(), at::Device(at::kCPU));
  EXPECT_TRUE(at::equal(down.host, x.cpu()));
  at::Tensor pinned = at::randn({1000}).pin_memory();
  at::Tensor up = transfer.Upload(pinned);
  EXPECT_EQ(up.device(), kCuda);
  EXPECT_TRUE(at::equal(up.cpu(), pinned));
  at::Tensor up_bf16 = transfer.Upload(pinned, at::kBFloat16);
  EXPECT_EQ(up_bf16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(up_bf16.cpu(), pinned.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(transfer.Download(up), pinned));
}

// Dequantization is one fp32 multiply per element and one cast: the device must give the CPU's bits exactly.
// The quantized matmul then differs by GEMM reassociation only (fp32: 1e-5 relative; bf16 output: 1e-2).
TEST_F(CudaTest, Int8AndFp8DequantizeOnTheDeviceAsOnTheCpu) {
  at::Tensor w = at::randn({96, 80}) * 0.05;
  at::Tensor x = at::randn({3, 7, 80});
  for (WeightQuant q : {WeightQuant::kInt8, WeightQuant::kFp8}) {
    SCOPED_TRACE(WeightQuantName(q));
    QuantizedWeight qw = QuantizeWeight(w, q);
    QuantizedWeight on_device = QuantizeWeight(w.to(kCuda), q);
    EXPECT_TRUE(at::equal(on_device.data.cpu().view(at::kByte), qw.data.view(at::kByte))) << "quantized bytes";
    EXPECT_TRUE(at::equal(on_device.scale.cpu(), qw.scale));
    at::Tensor data = qw.data.to(kCuda), scale = qw.scale.to(kCuda);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      at::Tensor cpu = DequantizeWeight(qw.data, qw.scale, dtype);
      at::Tensor gpu = DequantizeWeight(data, scale, dtype);
      EXPECT_EQ(gpu.device(), kCuda);
      EXPECT_TRUE(at::equal(gpu.cpu(), cpu)) << c10::toString(dtype);
    }
    at::Tensor ref = QuantizedMatmul(x, qw.data, qw.scale, at::kFloat);
    EXPECT_LE(RelativeError(QuantizedMatmul(x.to(kCuda), data, scale, at::kFloat), ref), 1e-5);
    EXPECT_LE(RelativeError(QuantizedMatmul(x.to(kCuda, at::kBFloat16), data, scale, at::kBFloat16), ref), 1e-2);
  }
}

// bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 2e-3 per operand): attention over bf16 q, k, v lands
// near 3e-3 of the fp32 result, so 1e-2 relative (‖out − ref‖ / ‖ref‖) is the bound; fp32 on the device matches
// the CPU to reassociation (the memory-efficient kernel runs fp32 as 3xTF32, ~1e-6; bound 1e-4).
TEST_F(CudaTest, Bf16AttentionStaysWithinBoundOfFp32) {
  at::Tensor q = at::randn({2, 300, 4, 64}), k = at::randn({2, 300, 4, 64}), v = at::randn({2, 300, 4, 64});
  at::Tensor ref = Attention(q, k, v);
  at::Tensor fp32 = Attention(q.to(kCuda), k.to(kCuda), v.to(kCuda));
  EXPECT_LE(RelativeError(fp32, ref), 1e-4);
  at::Tensor bf16 = Attention(q.to(kCuda, at::kBFloat16), k.to(kCuda, at::kBFloat16), v.to(kCuda, at::kBFloat16));
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  const double err = RelativeError(bf16, ref);
  EXPECT_LE(err, 1e-2);
  EXPECT_GT(err, 0.0);  // it really ran in bf16
  EXPECT_TRUE(at::isfinite(bf16).all().item<bool>());
}

}  // namespace
}  // namespace baton
