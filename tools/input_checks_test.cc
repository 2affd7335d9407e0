#include "tools/input_checks.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// `baton text-encode --input-ids`: the ids must index the text encoder's embedding table.
TEST(InputChecksTest, InputIdsMustIndexTheVocabulary) {
  constexpr int64_t kVocab = 100;
  const std::string path = "ids.safetensors";
  auto ids = [](std::vector<int64_t> v, at::ScalarType dtype = at::kLong) {
    return std::map<std::string, at::Tensor>{{"input_ids", at::tensor(v, at::kLong).to(dtype).unsqueeze(0)}};
  };
  EXPECT_TRUE(CheckInputIds(ids({0, 5, kVocab - 1}), kVocab, path).ok());
  EXPECT_TRUE(CheckInputIds(ids({1, 2}, at::kInt), kVocab, path).ok()) << "int32 ids are ids too";

  auto past = CheckInputIds(ids({3, kVocab}), kVocab, path);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("ids.safetensors: input_ids holds ids in [3, 100]; the text encoder's vocabulary is "
                                "[0, 100)"),
            std::string::npos)
      << past;
  auto negative = CheckInputIds(ids({-1, 4}), kVocab, path);
  EXPECT_NE(negative.message().find("holds ids in [-1, 4]"), std::string::npos) << negative;

  auto missing = CheckInputIds({{"ids", at::zeros({1, 2}, at::kLong)}}, kVocab, path);
  EXPECT_NE(missing.message().find("ids.safetensors: missing 'input_ids'"), std::string::npos) << missing;
  for (const at::Tensor& bad : {at::zeros({2, 3}, at::kLong), at::zeros({1, 0}, at::kLong), at::zeros({3}, at::kLong),
                                at::zeros({1, 3}, at::kFloat), at::zeros({1, 3}, at::kBool)}) {
    auto status = CheckInputIds({{"input_ids", bad}}, kVocab, path);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.sizes();
    EXPECT_NE(status.message().find("input_ids must be integer [1, L] with L > 0"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace baton
