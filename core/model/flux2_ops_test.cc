#include "core/model/flux2_ops.h"

#include <gtest/gtest.h>

#include <cmath>

namespace baton {
namespace {

TEST(Flux2OpsTest, RopeTablesMatchHandComputedAngles) {
  // Two tokens, axes dims {2, 4}: axis 0 has one frequency (1), axis 1 has two (1 and 2000^(-1/2)).
  at::Tensor ids = at::tensor({0, 0, 3, 5}, at::kLong).view({2, 2});
  auto [cos, sin] = RopeTables(ids, {2, 4}, 2000.0);
  ASSERT_EQ(cos.sizes(), (std::vector<int64_t>{2, 6}));
  const double f1 = 1.0 / std::sqrt(2000.0);
  const double expected_angles[2][6] = {{0, 0, 0, 0, 0, 0}, {3, 3, 5, 5, 5 * f1, 5 * f1}};
  for (int s = 0; s < 2; ++s) {
    for (int d = 0; d < 6; ++d) {
      EXPECT_NEAR(cos[s][d].item<double>(), std::cos(expected_angles[s][d]), 1e-6) << s << "," << d;
      EXPECT_NEAR(sin[s][d].item<double>(), std::sin(expected_angles[s][d]), 1e-6) << s << "," << d;
    }
  }
}

TEST(Flux2OpsTest, ApplyRopeRotatesInterleavedPairs) {
  // x [1, 1, 1, 4] = pairs (1, 2), (3, 4); angles a, b.
  const double a = 0.3, b = -1.1;
  at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4});
  at::Tensor cos = at::tensor({std::cos(a), std::cos(a), std::cos(b), std::cos(b)}, at::kFloat).view({1, 4});
  at::Tensor sin = at::tensor({std::sin(a), std::sin(a), std::sin(b), std::sin(b)}, at::kFloat).view({1, 4});
  at::Tensor y = ApplyRope(x, cos, sin).view({4});
  EXPECT_NEAR(y[0].item<double>(), 1 * std::cos(a) - 2 * std::sin(a), 1e-6);
  EXPECT_NEAR(y[1].item<double>(), 2 * std::cos(a) + 1 * std::sin(a), 1e-6);
  EXPECT_NEAR(y[2].item<double>(), 3 * std::cos(b) - 4 * std::sin(b), 1e-6);
  EXPECT_NEAR(y[3].item<double>(), 4 * std::cos(b) + 3 * std::sin(b), 1e-6);
}

TEST(Flux2OpsTest, SplitModulationKeepsShiftScaleGateOrder) {
  const int64_t d = 3;
  at::Tensor mod = at::arange(2 * 6 * d, at::kFloat).view({2, 6 * d});
  auto parts = SplitModulation(mod, 6);
  ASSERT_EQ(parts.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(parts[i].sizes(), (std::vector<int64_t>{2, 1, d}));
    // Chunk i of batch row 1 starts at 6d + i·d.
    EXPECT_EQ(parts[i][1][0][0].item<float>(), static_cast<float>(6 * d + i * d));
  }
}

TEST(Flux2OpsTest, AttentionMatchesExplicitSoftmaxLoops) {
  at::manual_seed(3);
  const int64_t B = 1, S = 3, H = 2, Dh = 4;
  at::Tensor q = at::randn({B, S, H, Dh}, at::kDouble), k = at::randn({B, S, H, Dh}, at::kDouble),
             v = at::randn({B, S, H, Dh}, at::kDouble);
  at::Tensor out = Attention(q, k, v);  // [B, S, H·Dh]
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < S; ++i) {
      double w[S], total = 0;
      for (int j = 0; j < S; ++j) {
        double dot = 0;
        for (int d = 0; d < Dh; ++d) dot += qa[0][i][h][d] * ka[0][j][h][d];
        w[j] = std::exp(dot / std::sqrt(static_cast<double>(Dh)));
        total += w[j];
      }
      for (int d = 0; d < Dh; ++d) {
        double expect = 0;
        for (int j = 0; j < S; ++j) expect += w[j] / total * va[0][j][h][d];
        EXPECT_NEAR(out[0][i][h * Dh + d].item<double>(), expect, 1e-12);
      }
    }
  }
}

TEST(Flux2OpsTest, TimestepFeaturesAreCosThenSin) {
  at::Tensor f = TimestepFeatures(at::tensor({500.0f}), 8);
  ASSERT_EQ(f.sizes(), (std::vector<int64_t>{1, 8}));
  for (int i = 0; i < 4; ++i) {
    const double freq = std::exp(-std::log(10000.0) * i / 4.0);
    EXPECT_NEAR(f[0][i].item<double>(), std::cos(500.0 * freq), 2e-4);
    EXPECT_NEAR(f[0][4 + i].item<double>(), std::sin(500.0 * freq), 2e-4);
  }
}

TEST(Flux2OpsTest, PositionIdsFollowDiffusersLayout) {
  at::Tensor img = ImagePositionIds(2, 3);
  ASSERT_EQ(img.sizes(), (std::vector<int64_t>{6, 4}));
  // Row-major over the grid: token 4 is row 1, column 1.
  EXPECT_EQ(img[4][1].item<int64_t>(), 1);
  EXPECT_EQ(img[4][2].item<int64_t>(), 1);
  EXPECT_EQ(img[2][2].item<int64_t>(), 2);
  EXPECT_EQ(img.select(1, 0).abs().sum().item<int64_t>(), 0);
  at::Tensor txt = TextPositionIds(5);
  EXPECT_EQ(txt[3][3].item<int64_t>(), 3);
  EXPECT_EQ(txt.narrow(1, 0, 3).abs().sum().item<int64_t>(), 0);
}

TEST(Flux2OpsTest, RmsNormNormalisesAndScales) {
  at::Tensor x = at::tensor({3.0f, 4.0f}).view({1, 2});
  at::Tensor w = at::tensor({2.0f, 0.5f});
  at::Tensor y = RmsNorm(x, w, 0.0);
  const double rms = std::sqrt((9.0 + 16.0) / 2.0);
  EXPECT_NEAR(y[0][0].item<double>(), 3.0 / rms * 2.0, 1e-6);
  EXPECT_NEAR(y[0][1].item<double>(), 4.0 / rms * 0.5, 1e-6);
}

}  // namespace
}  // namespace baton
