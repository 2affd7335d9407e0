// The 8-bit moments' codes (core/train/adamw8bit.h): bitsandbytes' dynamic code, and blockwise quantization that
// keeps every value within its code's resolution, an all-zero block at zero, and a tensor's part-block its own scale.
// (upstream.optimizer_recipes holds the codes and the whole step bitwise to bitsandbytes.)
#include "core/train/adamw8bit.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(AdamW8bitTest, TheDynamicCodesAreSortedAndSpanTheirRange) {
  for (bool is_signed : {true, false}) {
    const at::Tensor code = DynamicCode(is_signed);
    ASSERT_EQ(code.numel(), 256);
    EXPECT_TRUE(at::equal(code, std::get<0>(at::sort(code))));
    EXPECT_EQ(code[255].item<float>(), 1.0f);
    EXPECT_EQ(code[0].item<float>(), is_signed ? -code[254].item<float>() : 0.0f);
    EXPECT_LT(code.abs().min().item<float>(), 1e-6f);  // dense near zero: exponents down to 1e-6
  }
}

TEST(AdamW8bitTest, BlockwiseCodesKeepEachValueNearAndZeroBlocksZero) {
  const QuantCode code = QuantCode::Make(/*is_signed=*/true, at::kCPU);
  at::Tensor x = at::randn({3 * kQuantBlock + 40});  // three blocks and a part-block
  x.slice(0, kQuantBlock, 2 * kQuantBlock).zero_();
  x.slice(0, 3 * kQuantBlock).mul_(100);  // the part-block scaled by its own absmax
  at::Tensor q = at::empty(x.sizes(), at::kByte), absmax = at::empty({4});
  QuantizeBlockwise(x, code, q, absmax);
  EXPECT_EQ(absmax[1].item<float>(), 0.0f);
  EXPECT_EQ(absmax[3].item<float>(), x.slice(0, 3 * kQuantBlock).abs().max().item<float>());
  const at::Tensor back = DequantizeBlockwise(q, absmax, code);
  EXPECT_TRUE(at::equal(back.slice(0, kQuantBlock, 2 * kQuantBlock), at::zeros({kQuantBlock})));
  // Each value lands within half the code's widest gap (and one bin of the lookup table) of itself, in units of its
  // block's absmax.
  const float gap = (code.code.slice(0, 1) - code.code.slice(0, 0, 255)).max().item<float>();
  EXPECT_LT(gap, 0.02f);
  for (int b = 0; b < 4; ++b) {
    const int64_t end = std::min<int64_t>((b + 1) * kQuantBlock, x.numel());
    const at::Tensor err = (back.slice(0, b * kQuantBlock, end) - x.slice(0, b * kQuantBlock, end)).abs().max();
    EXPECT_LE(err.item<float>(), (0.5f * gap + 2.0f / 65535) * absmax[b].item<float>()) << "block " << b;
  }
}

}  // namespace
}  // namespace baton
