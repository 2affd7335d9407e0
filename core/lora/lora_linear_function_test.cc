#include "core/lora/lora_linear_function.h"

#include <gtest/gtest.h>

#include "core/lora/cpu_linear.h"
#include "core/lora/lora_linear.h"

namespace baton {
namespace {

double MaxRel(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

// fp32 GEMMs with K <= 24 reassociate to ~1e-7 relative; 1e-5 catches any wrong transpose, scale or missing term.
constexpr double kTol = 1e-5;

// The hand-written forward and backward against autograd over plain fp64 matmuls: y, dx, dA and dB.
TEST(LoraLinearFunctionTest, ForwardAndGradientsMatchAutogradInFp64) {
  at::manual_seed(4);
  const double scale = 2.5;
  at::Tensor x = at::randn({2, 5, 24}), w = at::randn({12, 24}), a = at::randn({3, 24}), b = at::randn({12, 3});
  at::Tensor gy = at::randn({2, 5, 12});

  at::Tensor x32 = x.clone().requires_grad_(), a32 = a.clone().requires_grad_(), b32 = b.clone().requires_grad_();
  at::Tensor y32 = LoraLinearOnednn(x32, w, a32, b32, scale);
  y32.backward(gy);

  at::Tensor x64 = x.to(at::kDouble).requires_grad_(), a64 = a.to(at::kDouble).requires_grad_(),
             b64 = b.to(at::kDouble).requires_grad_();
  at::Tensor y64 = at::matmul(x64, w.to(at::kDouble).t()) + at::matmul(at::matmul(x64, a64.t()), b64.t()) * scale;
  y64.backward(gy.to(at::kDouble));

  EXPECT_LT(MaxRel(y32, y64.detach()), kTol);
  EXPECT_LT(MaxRel(x32.grad(), x64.grad()), kTol);
  EXPECT_LT(MaxRel(a32.grad(), a64.grad()), kTol);
  EXPECT_LT(MaxRel(b32.grad(), b64.grad()), kTol);
}

TEST(LoraLinearFunctionTest, InputWithoutGradGetsNoneAndAdaptersStillDo) {
  at::manual_seed(5);
  at::Tensor x = at::randn({7, 16}), w = at::randn({8, 16});
  at::Tensor a = at::randn({2, 16}).requires_grad_(), b = at::randn({8, 2}).requires_grad_();
  LoraLinearOnednn(x, w, a, b, 1.0).sum().backward();
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(a.grad().defined());
  ASSERT_TRUE(b.grad().defined());
  // d(sum y)/dB = 1ᵀ·(x·Aᵀ): every row of dB is the column sums of x·Aᵀ.
  at::Tensor want = at::matmul(x, a.detach().t()).sum(0).expand({8, 2});
  EXPECT_LT(MaxRel(b.grad(), want.to(at::kDouble)), kTol);
}

TEST(LoraLinearFunctionTest, FrozenLinearGradientIsDyTimesW) {
  at::manual_seed(6);
  at::Tensor x = at::randn({3, 4, 10}).requires_grad_(), w = at::randn({6, 10}), gy = at::randn({3, 4, 6});
  at::Tensor y = FrozenLinearOnednn(x, w);
  y.backward(gy);
  EXPECT_LT(MaxRel(y, at::matmul(x.detach(), w.t()).to(at::kDouble)), kTol);
  EXPECT_LT(MaxRel(x.grad(), at::matmul(gy, w).to(at::kDouble)), kTol);
  EXPECT_FALSE(w.grad().defined());
}

// The module picks the fused path on CPU fp32 and the generic one otherwise: both must give the same output
// and adapter gradients (the generic path is what fp64 gradient checks and GPUs run).
TEST(LoraLinearFunctionTest, ModuleAgreesAcrossCpuLinearBackends) {
  at::manual_seed(7);
  LoraLinear layer(20, 9, at::TensorOptions());
  {
    at::NoGradGuard no_grad;
    layer->weight.copy_(at::randn({9, 20}));
  }
  layer->AttachLora(4, 8.0, 0.0, 1);
  {
    at::NoGradGuard no_grad;
    layer->lora_B().copy_(at::randn({9, 4}));
  }
  at::Tensor x = at::randn({2, 6, 20});
  auto run = [&](CpuLinearBackend backend) {
    SetCpuLinearBackend(backend);
    layer->lora_A().mutable_grad() = at::Tensor();
    layer->lora_B().mutable_grad() = at::Tensor();
    at::Tensor xi = x.clone().requires_grad_();
    at::Tensor y = layer(xi);
    (y * y).sum().backward();
    return std::vector<at::Tensor>{y.detach(), xi.grad(), layer->lora_A().grad().clone(),
                                   layer->lora_B().grad().clone()};
  };
  auto onednn = run(CpuLinearBackend::kOnednn);
  auto aten = run(CpuLinearBackend::kAten);
  SetCpuLinearBackend(CpuLinearBackend::kOnednn);
  for (size_t i = 0; i < onednn.size(); ++i) EXPECT_LT(MaxRel(onednn[i], aten[i].to(at::kDouble)), kTol) << i;
}

TEST(CpuLinearTest, BackendNamesParseAndUnknownIsRefused) {
  EXPECT_EQ(*ParseCpuLinearBackend("onednn"), CpuLinearBackend::kOnednn);
  EXPECT_EQ(*ParseCpuLinearBackend("aten"), CpuLinearBackend::kAten);
  auto bad = ParseCpuLinearBackend("mkl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("onednn, aten"), std::string::npos);
}

TEST(CpuLinearTest, TransposedViewAsWeightAndFusedAdd) {
  at::manual_seed(8);
  at::Tensor x = at::randn({5, 12}), w = at::randn({12, 7}), other = at::randn({5, 7});
  // w.t() is a [7, 12] non-contiguous view: y = x·w.
  EXPECT_LT(MaxRel(LinearNoBias(x, w.t()), at::matmul(x, w).to(at::kDouble)), kTol);
  EXPECT_LT(MaxRel(LinearNoBiasAdd(x, w.t(), other), (at::matmul(x, w) + other).to(at::kDouble)), kTol);
}

}  // namespace
}  // namespace baton
