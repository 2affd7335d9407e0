#include "core/sample/expert_denoiser.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// Each expert answers with its own constant; batches keep their order whichever expert ran them.
TEST(ExpertDenoiserTest, RoutesEachBatchByItsTimestepAtTheBoundary) {
  auto constant = [](float v, int* calls) -> Denoiser {
    return [v, calls](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
      ++*calls;
      std::vector<at::Tensor> out;
      for (const NoisyBatch& b : batches) out.push_back(at::full_like(b.noisy, v));
      return out;
    };
  };
  int high_calls = 0, low_calls = 0;
  const Denoiser d = ExpertDenoiser(constant(1, &high_calls), constant(2, &low_calls), 0.9);
  std::vector<NoisyBatch> batches(4);
  const double t[4] = {0.999, 0.75, 0.9, 0.8999};  // 999, 750, 900 (the boundary: high), 900 (rounded: high)
  for (int i = 0; i < 4; ++i) {
    batches[i].noisy = at::zeros({1});
    batches[i].timestep = at::full({1}, t[i], at::kDouble);
  }
  auto out = d(batches);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].item<float>(), 1);
  EXPECT_EQ((*out)[1].item<float>(), 2);
  EXPECT_EQ((*out)[2].item<float>(), 1);
  EXPECT_EQ((*out)[3].item<float>(), 1);
  EXPECT_EQ(high_calls, 1);
  EXPECT_EQ(low_calls, 1);
}

}  // namespace
}  // namespace baton
