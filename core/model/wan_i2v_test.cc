#include "core/model/wan_i2v.h"

#include <gtest/gtest.h>

#include "core/model/wan_family.h"
#include "core/train/common.h"

namespace baton {
namespace {

TEST(WanI2vTest, MaskMarksTheGivenPixelFrames) {
  // 9 pixel frames = 3 latent frames; channel k of latent frame j >= 1 is pixel frame 4j + k - 3.
  const at::Tensor first = WanConditionMask(3, 2, 2, /*keep_last=*/false);
  ASSERT_EQ(first.sizes(), (std::vector<int64_t>{4, 3, 2, 2}));
  EXPECT_TRUE(at::equal(first.select(1, 0), at::ones({4, 2, 2})));
  EXPECT_EQ(first.slice(1, 1).sum().item<double>(), 0.0);
  const at::Tensor both = WanConditionMask(3, 2, 2, /*keep_last=*/true);
  // The last pixel frame (8) is channel 3 of latent frame 2 only.
  EXPECT_EQ(both.select(1, 2).sum().item<double>(), 4.0);
  EXPECT_EQ(both.select(1, 2).select(0, 3).sum().item<double>(), 4.0);
  EXPECT_EQ(both.select(1, 1).sum().item<double>(), 0.0);
}

TEST(WanI2vTest, ConditionedInputConcatenatesOrReplacesTheFirstFrame) {
  const at::Tensor noisy = at::randn({2, 4, 3, 2, 2});
  const at::Tensor cond = at::randn({2, 8, 3, 2, 2});
  auto cat = WanConditionedInput(kWanFirstFrame, noisy, cond);
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_TRUE(at::equal(cat->slice(1, 0, 4), noisy));
  EXPECT_TRUE(at::equal(cat->slice(1, 4), cond));
  const at::Tensor first = at::randn({2, 4, 1, 2, 2});
  auto clean = WanConditionedInput(kWanCleanFirstFrame, noisy, first);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_TRUE(at::equal(clean->slice(2, 0, 1), first));
  EXPECT_TRUE(at::equal(clean->slice(2, 1), noisy.slice(2, 1)));
  EXPECT_FALSE(WanConditionedInput(kWanFirstFrame, noisy, first).ok());
  EXPECT_FALSE(WanConditionedInput(kWanCleanFirstFrame, noisy, cond).ok());
  EXPECT_FALSE(WanConditionedInput("image", noisy, cond).ok());
}

TEST(WanI2vTest, ExpandedTimestepsAreZeroOnTheFirstFrameTokens) {
  WanConfig c;  // patch (1, 2, 2): a 4x6 latent frame is 2x3 = 6 tokens
  const at::Tensor t = WanExpandedTimesteps(c, at::tensor({500.0f, 250.0f}), 3, 4, 6);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{2, 18}));
  EXPECT_EQ(t.slice(1, 0, 6).abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(t[0].slice(0, 6), at::full({12}, 500.0f)));
  EXPECT_TRUE(at::equal(t[1].slice(0, 6), at::full({12}, 250.0f)));
}

TEST(WanI2vTest, MaskedLossAveragesOnlyTheKeptFrames) {
  const at::Tensor pred = at::randn({2, 4, 3, 2, 2}), target = at::randn({2, 4, 3, 2, 2});
  const at::Tensor mask = WanFirstFrameLossMask(2, 3);
  const double masked = FlowMatchingLoss(pred, target, mask).item<double>();
  const double kept = (pred.slice(2, 1) - target.slice(2, 1)).pow(2).mean().item<double>();
  EXPECT_NEAR(masked, kept, 1e-6 * kept);
  EXPECT_NE(masked, FlowMatchingLoss(pred, target).item<double>());
}

TEST(WanI2vTest, TargetWireTakesALossMaskOfTheTargetsFrames) {
  WanConfig c;
  c.num_attention_heads = 2;
  c.attention_head_dim = 12;
  c.in_channels = c.out_channels = 4;
  WanFamily family(c);
  const at::Tensor target = at::randn({2, 4, 3, 2, 2});
  EXPECT_TRUE(family.CheckWire(WireKind::kTarget, {{"target", target}}, at::kFloat).ok());
  EXPECT_TRUE(
      family.CheckWire(WireKind::kTarget, {{"target", target}, {"loss_mask", WanFirstFrameLossMask(2, 3)}}, at::kFloat)
          .ok());
  EXPECT_FALSE(
      family.CheckWire(WireKind::kTarget, {{"target", target}, {"loss_mask", WanFirstFrameLossMask(2, 4)}}, at::kFloat)
          .ok());
  EXPECT_FALSE(family.CheckWire(WireKind::kTarget, {{"target", target}, {"extra", target}}, at::kFloat).ok());
}

}  // namespace
}  // namespace baton
