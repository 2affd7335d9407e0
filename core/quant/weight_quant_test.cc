#include "core/quant/weight_quant.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(WeightQuant, ParsesTheThreeNamesAndRefusesOthers) {
  EXPECT_EQ(*ParseWeightQuant("none"), WeightQuant::kNone);
  EXPECT_EQ(*ParseWeightQuant("int8"), WeightQuant::kInt8);
  EXPECT_EQ(*ParseWeightQuant("fp8"), WeightQuant::kFp8);
  auto bad = ParseWeightQuant("nf4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("none, int8, fp8"), std::string::npos);
  EXPECT_EQ(WeightQuantName(WeightQuant::kFp8), "fp8");
}

TEST(WeightQuant, OnlyBlockLinearWeightsAreQuantized) {
  EXPECT_TRUE(IsQuantizedFlux2Param("transformer_blocks.0.attn.to_q.weight", {256, 256}));
  EXPECT_TRUE(IsQuantizedFlux2Param("single_transformer_blocks.3.attn.to_qkv_mlp_proj.weight", {1536, 256}));
  EXPECT_FALSE(IsQuantizedFlux2Param("transformer_blocks.0.attn.norm_q.weight", {64}));
  EXPECT_FALSE(IsQuantizedFlux2Param("transformer_blocks.0.attn.to_q.lora_A.weight", {16, 256}));
  EXPECT_FALSE(IsQuantizedFlux2Param("x_embedder.weight", {256, 128}));
  EXPECT_FALSE(IsQuantizedFlux2Param("proj_out.weight", {128, 256}));
  EXPECT_FALSE(IsQuantizedFlux2Param("double_stream_modulation_img.linear.weight", {1536, 256}));
}

TEST(WeightQuant, BytesCountOneBytePerElementPlusARowScale) {
  EXPECT_EQ(FrozenParamBytes({512, 256}, /*quantized=*/true, 2), 512 * 256 + 512 * 4);
  EXPECT_EQ(FrozenParamBytes({512, 256}, /*quantized=*/false, 2), 512 * 256 * 2);
  EXPECT_EQ(FrozenParamBytes({64}, /*quantized=*/false, 4), 256);
}

}  // namespace
}  // namespace baton
