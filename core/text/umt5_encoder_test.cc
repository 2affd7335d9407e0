// umT5 encoder plumbing: config parsing and rejection, the random writer's layout as Umt5Encoder opens it,
// relative-position buckets against values printed by transformers' _relative_position_bucket, padding and
// batching invariants. Numerics against transformers itself: tests/upstream/test_umt5.py.
#include "core/text/umt5_encoder.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/text/umt5_checkpoint.h"
#include "core/text/umt5_config.h"
#include "core/util/files.h"

namespace baton {
namespace {

std::string FreshUmt5Dir(const std::string& name) {
  std::string dir = JoinPath(::testing::TempDir(), absl::StrCat("umt5_test_", name, "_", getpid()));
  EXPECT_TRUE(RemoveAll(dir).ok());
  return dir;
}

TEST(Umt5ConfigTest, RoundTripsAndRejectsUnknownActivations) {
  Umt5Config c = TinyUmt5Config(100);
  auto parsed = ParseUmt5Config(Umt5ConfigToJson(c), "tiny");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->d_model, 32);
  EXPECT_EQ(parsed->vocab_size, 100);
  EXPECT_EQ(*parsed->activation(), Umt5Activation::kGeluTanh);
  EXPECT_TRUE(IsUmt5ConfigJson(Umt5ConfigToJson(c)));
  EXPECT_FALSE(IsUmt5ConfigJson(R"({"model_type": "mistral"})"));
  c.feed_forward_proj = "gated-banana";
  auto bad = ParseUmt5Config(Umt5ConfigToJson(c), "cfg.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gated-banana"), std::string::npos) << bad.status();
  auto missing = ParseUmt5Config(R"({"model_type": "umt5", "d_model": 4})", "cfg.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("vocab_size"), std::string::npos) << missing.status();
}

TEST(Umt5EncoderTest, BucketsMatchTransformers) {
  // transformers: _relative_position_bucket(memory - context) for an encoder with 32 buckets, distance 128.
  const std::vector<int64_t> distance = {0, 1, 2, 7, 8, 9, 15, 16, 20, 50, 100, 127, 128, 200, 299};
  const std::vector<int64_t> forward = {0, 17, 18, 23, 24, 24, 25, 26, 26, 29, 31, 31, 31, 31, 31};
  const std::vector<int64_t> backward = {0, 1, 2, 7, 8, 8, 9, 10, 10, 13, 15, 15, 15, 15, 15};
  at::Tensor b = Umt5RelativePositionBuckets(300, 32, 128, at::kCPU);
  for (size_t i = 0; i < distance.size(); ++i) {
    EXPECT_EQ(b[0][distance[i]].item<int64_t>(), forward[i]) << "key " << distance[i] << " after the query";
    EXPECT_EQ(b[distance[i]][0].item<int64_t>(), backward[i]) << "key " << distance[i] << " before the query";
  }
}

TEST(Umt5EncoderTest, PaddingDoesNotChangeTheTokensAndRowsAreIndependent) {
  const std::string dir = FreshUmt5Dir("padding");
  ASSERT_TRUE(WriteRandomUmt5Encoder(TinyUmt5Config(64), dir, 3, /*bf16=*/false, /*max_shard_bytes=*/20000).ok());
  ASSERT_TRUE(PathExists(JoinPath(dir, "model.safetensors.index.json")));
  auto enc = Umt5Encoder::Open(dir, at::kFloat, at::kCPU);
  ASSERT_TRUE(enc.ok()) << enc.status();
  at::Tensor ids = at::tensor({5, 9, 33, 1, 0, 0, 7, 8, 2, 40, 41, 1}, at::kLong).view({2, 6});
  at::Tensor mask = at::tensor({1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, at::kLong).view({2, 6});
  auto both = (*enc)->Encode(ids, mask);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->sizes(), (std::vector<int64_t>{2, 6, 32}));
  auto short_row = (*enc)->Encode(ids.narrow(0, 0, 1).narrow(1, 0, 4), at::Tensor());
  ASSERT_TRUE(short_row.ok()) << short_row.status();
  EXPECT_TRUE(at::allclose(both->narrow(0, 0, 1).narrow(1, 0, 4), *short_row, 1e-5, 1e-5));
  auto second = (*enc)->Encode(ids.narrow(0, 1, 1), at::Tensor());
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(at::allclose(both->narrow(0, 1, 1), *second, 1e-5, 1e-5));
  // Padding is masked as keys but the padded positions still get outputs, and they differ from the tokens'.
  EXPECT_FALSE(at::allclose(both->select(1, 4), both->select(1, 3)));
  EXPECT_TRUE(RemoveAll(dir).ok());
}

TEST(Umt5EncoderTest, Bf16ComputeStaysCloseToFp32) {
  // bf16 compute keeps wo and the residual stream after it in fp32, as transformers' _keep_in_fp32_modules.
  const std::string dir = FreshUmt5Dir("bf16");
  ASSERT_TRUE(WriteRandomUmt5Encoder(TinyUmt5Config(64), dir, 5, /*bf16=*/true).ok());
  auto fp32 = Umt5Encoder::Open(dir, at::kFloat, at::kCPU);
  auto bf16 = Umt5Encoder::Open(dir, at::kBFloat16, at::kCPU);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  at::Tensor ids = at::arange(1, 21, at::kLong).view({1, 20});
  auto a = (*fp32)->Encode(ids, at::Tensor());
  auto b = (*bf16)->Encode(ids, at::Tensor());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->scalar_type(), at::kFloat);
  const double rel = ((*a - *b).abs().max() / a->abs().max()).item<double>();
  EXPECT_LT(rel, 3e-2) << "bf16 vs fp32 relative error";
  EXPECT_GT(rel, 0.0) << "bf16 must actually compute in bf16";
  EXPECT_TRUE(RemoveAll(dir).ok());
}

TEST(Umt5EncoderTest, RejectsBadIdsAndWrongShapes) {
  const std::string dir = FreshUmt5Dir("bad");
  Umt5Config c = TinyUmt5Config(64);
  ASSERT_TRUE(WriteRandomUmt5Encoder(c, dir, 1).ok());
  auto enc = Umt5Encoder::Open(dir, at::kFloat, at::kCPU);
  ASSERT_TRUE(enc.ok()) << enc.status();
  auto out = (*enc)->Encode(at::tensor({3, 64}, at::kLong).view({1, 2}), at::Tensor());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("token id 64"), std::string::npos) << out.status();
  // A config that disagrees with the weights fails at Open, naming the tensor.
  c.d_ff = 40;
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Umt5ConfigToJson(c)).ok());
  auto wrong = Umt5Encoder::Open(dir, at::kFloat, at::kCPU);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("wi_0"), std::string::npos) << wrong.status();
  EXPECT_TRUE(RemoveAll(dir).ok());
}

}  // namespace
}  // namespace baton
