#include "core/device/bulk_copy.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

std::map<std::string, at::Tensor> Mixed() {
  return {{"a.weight", at::randn({3, 5})},
          {"b.weight", at::randn({7}).to(at::kBFloat16)},
          {"__step__", at::scalar_tensor(4, at::kLong)},
          {"c.q8", at::randint(0, 255, {2, 9}).to(at::kByte)},
          {"empty", at::zeros({0, 4})}};
}

// On the host the copies are copies: equal values, the asked dtype, never the input's storage.
TEST(BulkCopyTest, HostTensorsDownloadAsCopiesInTheAskedDtype) {
  const auto in = Mixed();
  const auto out = DownloadAll(in);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    EXPECT_TRUE(at::equal(out.at(name), t)) << name;
    EXPECT_EQ(out.at(name).scalar_type(), t.scalar_type()) << name;
    if (t.numel() > 0) EXPECT_NE(out.at(name).data_ptr(), t.data_ptr()) << name;
  }
  const auto fp32 = DownloadAll(in, at::kFloat);
  EXPECT_EQ(fp32.at("b.weight").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(fp32.at("b.weight"), in.at("b.weight").to(at::kFloat)));
  const auto shared = DownloadAll(in, std::nullopt, HostTensors::kShare);
  EXPECT_EQ(shared.at("a.weight").data_ptr(), in.at("a.weight").data_ptr()) << "shared where it already fits";
  const auto same = UploadAll(in, at::kCPU);
  EXPECT_TRUE(same.at("a.weight").is_same(in.at("a.weight"))) << "already there: passed through";
}

}  // namespace
}  // namespace baton
