// WanFamily as the pipeline uses it: 8-bit block weights stay close to full precision and shrink the stage, the
// family's training hooks shape a micro-batch as diffusers' Wan takes it, and the planner sizes Wan from its config.
#include "core/model/wan_family.h"

#include <gtest/gtest.h>

#include "core/model/quantize_module.h"
#include "core/model/wan_i2v.h"
#include "core/pipeline/partition.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/testing/tiny_wan.h"
#include "core/util/files.h"

namespace baton {
namespace {

WanConfig Tiny() { return test_util::TinyWanConfig(2); }

TensorMap RunTiny(const ModelFamily& model, WeightQuant quant, int64_t* frozen_bytes) {
  auto shell = model.BuildShell(at::kFloat, at::kCPU);
  auto stage = model.BuildStage(model.FullRange(), at::kFloat, at::kCPU, nullptr, false, quant);
  EXPECT_TRUE(shell.ok() && stage.ok()) << shell.status() << stage.status();
  *frozen_bytes = FrozenBytes((*stage)->module());
  at::manual_seed(5);
  NoisyBatch batch;
  batch.noisy = at::randn({1, 4, 2, 4, 4});
  batch.prompt_embeds = at::randn({1, 5, 16});
  batch.timestep = at::full({1}, 0.4);
  auto inputs = model.MicroBatchInputs(batch);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_NEAR(inputs->at("timestep").item<double>(), 400.0, 1e-3);  // diffusers' Wan takes 1000·sigma
  auto out = (*shell)->Run(*inputs, at::kFloat);
  EXPECT_TRUE(out.ok()) << out.status();
  TensorMap constants = out->constants;
  constants.insert(out->tables.begin(), out->tables.end());
  at::NoGradGuard no_grad;
  return (*stage)->Forward(out->inputs, constants);
}

TEST(WanFamilyTest, Int8BlockWeightsStayCloseAndShrinkTheStage) {
  const std::string dir = test_util::MakeTempDir("wan_family_int8");
  ASSERT_TRUE(WriteRandomWanWeights(Tiny(), dir, 3).ok());
  auto model = OpenModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), "wan");
  int64_t full_bytes = 0, int8_bytes = 0;
  const at::Tensor full = RunTiny(**model, WeightQuant::kNone, &full_bytes).at("output");
  const at::Tensor int8 = RunTiny(**model, WeightQuant::kInt8, &int8_bytes).at("output");
  EXPECT_EQ(full.sizes(), (std::vector<int64_t>{1, 4, 2, 4, 4}));
  const double rel = (full - int8).abs().max().item<double>() / full.abs().max().item<double>();
  EXPECT_LT(rel, 0.03);  // per-row int8: ~1% per weight
  EXPECT_GT(rel, 0.0);   // really quantized
  EXPECT_LT(int8_bytes, full_bytes * 6 / 10);
}

TEST(WanFamilyTest, CacheThatDoesNotFitIsNamed) {
  auto model = OpenModelConfig(JoinPath(test_util::SourceDir(), "configs/models/wan2.1-i2v-14b-480p.json"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->CheckCacheFits({16, 4096, kWanFirstFrame, 20, 1280}).ok());
  EXPECT_TRUE((*model)->CheckCacheFits({16, 4096, kWanFirstLastFrame, 20, 1280}).ok());
  const absl::Status t2v = (*model)->CheckCacheFits({16, 4096});
  EXPECT_NE(t2v.message().find("image-to-video"), std::string::npos) << t2v;
  const absl::Status no_clip = (*model)->CheckCacheFits({16, 4096, kWanFirstFrame, 20, 0});
  EXPECT_NE(no_clip.message().find("image_encoder"), std::string::npos) << no_clip;
  EXPECT_FALSE((*model)->CheckCacheFits({16, 512, kWanFirstFrame, 20, 1280}).ok());
  EXPECT_FALSE((*model)->CheckCacheFits({16, 4096, kWanCleanFirstFrame, 16, 1280}).ok());
  EXPECT_FALSE((*model)->BuildShell(at::kFloat, at::kCPU).ok());  // config only: no weights
}

// Wan 2.2 A14B (one expert, 14.3 B parameters, 28.6 GB in bf16) on two 24 GB GPUs: only with 8-bit block weights,
// at 49 frames of 480x832 (13x30x52 = 20280 video tokens + 512 text), batch 1, every block recomputed. (81 frames
// need ~26 GB per stage by the planner's estimate: 4 stages.)
TEST(WanFamilyTest, PlannerPutsA14bOnTwo24GbGpusWithInt8) {
  auto model = OpenModelConfig(JoinPath(test_util::SourceDir(), "configs/models/wan2.2-t2v-a14b.json"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto source = PlanSourceFor(**model);
  ASSERT_TRUE(source.ok()) << source.status();
  PartitionOptions o;
  o.stages = 2;
  o.memory_budget_bytes = {24'000'000'000};
  o.micro_batches = 1;
  o.tokens_per_micro_batch = 20280 + 512;
  o.text_tokens_per_micro_batch = 512;
  auto bf16 = Partition(*source, o);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_FALSE(bf16->fits) << RenderPlan(*bf16);
  o.quantize = WeightQuant::kInt8;
  auto int8 = Partition(*source, o);
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_TRUE(int8->fits) << RenderPlan(*int8);
  EXPECT_EQ(int8->stages[0].block_end, 20);  // 40 equal blocks, the embedders and head tiny
  // The stages hold everything but the coordinator's shell (time and text embedders, the shared time projection).
  auto config = LoadWanConfig(JoinPath(test_util::SourceDir(), "configs/models/wan2.2-t2v-a14b.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  int64_t params = 0;
  for (const StageSpec& s : int8->stages) params += s.params;
  EXPECT_EQ(params + config->ShellParams(), config->TotalParams());
  EXPECT_NEAR(static_cast<double>(config->TotalParams()) / 1e9, 14.29, 0.01);
  EXPECT_NE(RenderPlan(*int8).find("Wan plan: 40 blocks"), std::string::npos) << RenderPlan(*int8);
  // The temporaries a bf16 stage makes besides its graph (partition.h): one FFN weight dequantized for its matmul plus
  // one fp32 tile, and each adapted linear's fp32 input copy in a block's graph (default targets: attn1 q/k/v/out and
  // attn2 q/out read the 20280 video tokens at D, attn2 k/v the 512 text tokens).
  const int64_t d = config->inner_dim(), video = 20280, text = 512;
  EXPECT_EQ(int8->stages[0].transient_bytes, d * config->ffn_dim * 2 + kDequantTileBytes);
  EXPECT_EQ(bf16->stages[0].transient_bytes, 0);
  auto planned = (*source)(o);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->block_lora_input, (6 * video + 2 * text) * d);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// The planner counts what image-to-video adds: the 36-channel patch embedding and the CLIP branch's 257 context tokens.
TEST(WanFamilyTest, PlannerCountsImageToVideoChannelsAndImageContext) {
  WanConfig t2v;  // 14B dims
  t2v.num_attention_heads = 40;
  WanConfig i2v = t2v;
  i2v.in_channels = 36;
  WanConfig clip = i2v;
  clip.image_dim = 1280;
  clip.added_kv_proj_dim = clip.inner_dim();
  PlanShape shape;
  shape.tokens = 20280 + 512;
  shape.text_tokens = 512;
  const BlockPlanInfo plain = WanFamily(t2v).Block(0, shape), branch = WanFamily(clip).Block(0, shape);
  EXPECT_DOUBLE_EQ(WanFamily(i2v).Embedders(shape).extra_macs, WanFamily(t2v).Embedders(shape).extra_macs * 36 / 16);
  const double d = static_cast<double>(t2v.inner_dim());
  EXPECT_DOUBLE_EQ(branch.attention_macs - plain.attention_macs, 2.0 * 20280 * 257 * d);
  EXPECT_GT(branch.params, plain.params);
}

}  // namespace
}  // namespace baton
