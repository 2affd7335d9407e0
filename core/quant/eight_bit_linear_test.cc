// The text encoders' 8-bit Linear: the table dequantization against DequantizeWeight (bitwise, every kind and
// compute dtype) and libtorch's int8 GEMM against dequantize-then-GEMM.
#include "core/quant/eight_bit_linear.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

QuantizedWeight RandomQuantized(int64_t out, int64_t in, WeightQuant q, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::Tensor w = at::randn({out, in}, gen, at::kFloat) * at::rand({out, 1}, gen, at::kFloat);
  w[3].zero_();  // an all-zero row: scale 0
  return QuantizeWeight(w, q);
}

TEST(EightBitLinearTest, TableDequantizationIsBitwiseDequantizeWeight) {
  for (WeightQuant q : {WeightQuant::kInt8, WeightQuant::kFp8}) {
    const QuantizedWeight w = RandomQuantized(37, 300, q, 7);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
      const at::Tensor fast = DequantizeWeightFast(w.data, w.scale, dtype);
      const at::Tensor slow = DequantizeWeight(w.data, w.scale, dtype);
      ASSERT_EQ(fast.scalar_type(), dtype);
      EXPECT_TRUE(at::equal(fast, slow)) << WeightQuantName(q) << " to " << c10::toString(dtype);
    }
  }
}

TEST(EightBitLinearTest, Int8GemmAgreesWithDequantizeThenGemm) {
  const QuantizedWeight w = RandomQuantized(48, 64, WeightQuant::kInt8, 3);
  auto gen = at::detail::createCPUGenerator(4);
  const at::Tensor x = at::randn({2, 5, 64}, gen, at::kFloat).to(at::kBFloat16);
  const at::Tensor bias = at::randn({48}, gen, at::kFloat).to(at::kBFloat16);
  const at::Tensor exact =
      at::linear(x.to(at::kDouble), DequantizeWeight(w.data, w.scale, at::kDouble), bias.to(at::kDouble));
  SetEightBitGemm(EightBitGemm::kDequantize);
  const at::Tensor dequantized = EightBitLinear(x, w, bias);
  SetEightBitGemm(EightBitGemm::kInt8Pack);
  const at::Tensor packed = EightBitLinear(x, w, bias);
  SetEightBitGemm(EightBitGemm::kDequantize);
  ASSERT_EQ(packed.sizes(), dequantized.sizes());
  EXPECT_EQ(packed.scalar_type(), at::kBFloat16);
  // Both differ from the exact product by bf16 roundings only (the weight's, the scale's, the output's): 2^-8 each.
  for (const at::Tensor& y : {dequantized, packed}) {
    const double rel = ((y.to(at::kDouble) - exact).norm() / exact.norm()).item<double>();
    EXPECT_LT(rel, 3 * std::ldexp(1.0, -8));
  }
  EXPECT_FALSE(ParseEightBitGemm("mkl").ok());
  EXPECT_EQ(*ParseEightBitGemm("int8pack"), EightBitGemm::kInt8Pack);
}

}  // namespace
}  // namespace baton
