// The planner's split as the driver asks for it: each stage's device, the options a pipeline gives the planner, and
// the [worker][chunk] block ranges for a tiny FLUX.2 model (contiguous, every block once, the embedders on the first
// worker and the head on the last; interleaved: each worker's chunks in virtual-stage order, recompute all or none).
#include "stage_driver/stage_plan.h"

#include <gtest/gtest.h>

#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"

namespace baton {
namespace {

std::unique_ptr<ModelFamily> TinyModel() {
  const std::string dir = test_util::MakeTempDir("stage_plan_test");
  EXPECT_TRUE(WriteRandomFlux2Weights(test_util::TinyFlux2Config(), dir, 1).ok());
  auto model = OpenModel(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

PipelineSpec Spec() {
  PipelineSpec spec;
  spec.lora.rank = 4;
  spec.micro_batches = 2;
  return spec;
}

TEST(StagePlanTest, EachStageIsPlannedForItsListedDeviceElseItsWorkersKind) {
  EXPECT_EQ(PlanDevices({"cuda:1", "cpu"}, 3, false),
            (std::vector<PlanDevice>{PlanDevice::kCuda, PlanDevice::kCpu, PlanDevice::kCpu}))
      << "a local worker past the list computes on the CPU";
  EXPECT_EQ(PlanDevices({}, 2, true), (std::vector<PlanDevice>{PlanDevice::kCuda, PlanDevice::kCuda}))
      << "a remote worker's --device is unknown: planned as CUDA, the larger fixed cost";
}

TEST(StagePlanTest, ThePipelineSetsThePlannersOptions) {
  PipelineSpec spec = Spec();
  spec.quantize = "int8";
  spec.devices = {"cpu", "cuda"};
  auto popts =
      StagePartitionOptions(spec, {/*image=*/64, /*text=*/16}, /*samples_per_micro_batch=*/3, 2, at::kBFloat16, false);
  ASSERT_TRUE(popts.ok()) << popts.status();
  EXPECT_EQ(popts->stages, 2);
  EXPECT_EQ(popts->bytes_per_param, 2);
  EXPECT_EQ(popts->activation_bytes, 2);
  EXPECT_EQ(popts->quantize, WeightQuant::kInt8);
  EXPECT_EQ(popts->lora_rank, 4);
  EXPECT_EQ(popts->micro_batches, 2);
  EXPECT_EQ(popts->tokens_per_micro_batch, (64 + 16) * 3);
  EXPECT_EQ(popts->text_tokens_per_micro_batch, 16 * 3);
  EXPECT_EQ(popts->devices, (std::vector<PlanDevice>{PlanDevice::kCpu, PlanDevice::kCuda}));
  spec.quantize = "int4";
  auto bad = StagePartitionOptions(spec, {64, 16}, 1, 2, at::kFloat, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos) << bad.status();
}

TEST(StagePlanTest, EveryBlockLandsOnExactlyOneStageInOrder) {
  auto model = TinyModel();
  ASSERT_NE(model, nullptr);
  auto popts = StagePartitionOptions(Spec(), {16, 8}, 1, 2, at::kFloat, false);
  ASSERT_TRUE(popts.ok());
  auto plan = PlanStages(*model, *popts, 2, 1, /*quiet=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 2u);
  int64_t next = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ((*plan)[i].size(), 1u);
    const StageSpec& s = (*plan)[i][0];
    EXPECT_EQ(s.block_begin, next);
    EXPECT_GT(s.block_end, s.block_begin) << "no empty stage";
    EXPECT_EQ(s.has_embedders, i == 0);
    EXPECT_EQ(s.has_head, i == 1);
    next = s.block_end;
  }
  EXPECT_EQ(next, model->num_blocks());
}

TEST(StagePlanTest, InterleavedChunksGoRoundTheWorkersWithOneRecomputeDecision) {
  auto model = TinyModel();
  ASSERT_NE(model, nullptr);
  ASSERT_GE(model->num_blocks(), 4);
  auto popts = StagePartitionOptions(Spec(), {16, 8}, 1, 2, at::kFloat, false);
  ASSERT_TRUE(popts.ok());
  popts->recompute = RecomputePolicy::kAll;
  auto plan = PlanStages(*model, *popts, 2, 2, /*quiet=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Virtual stages 0, 1, 2, 3 on workers 0, 1, 0, 1: worker 0 holds chunks 0 and 2.
  ASSERT_EQ((*plan)[0].size(), 2u);
  ASSERT_EQ((*plan)[1].size(), 2u);
  EXPECT_EQ((*plan)[0][0].block_begin, 0);
  EXPECT_EQ((*plan)[1][0].block_begin, (*plan)[0][0].block_end);
  EXPECT_EQ((*plan)[0][1].block_begin, (*plan)[1][0].block_end);
  EXPECT_EQ((*plan)[1][1].block_begin, (*plan)[0][1].block_end);
  EXPECT_EQ((*plan)[1][1].block_end, model->num_blocks());
  EXPECT_TRUE((*plan)[0][0].has_embedders);
  EXPECT_TRUE((*plan)[1][1].has_head);
  for (const auto& worker : *plan) {
    for (const StageSpec& chunk : worker) {
      EXPECT_EQ(chunk.recompute_blocks, chunk.block_end - chunk.block_begin) << "recompute: every block";
    }
  }
}

TEST(StagePlanTest, AModelThatDoesNotFitIsRefusedSayingSo) {
  auto model = TinyModel();
  ASSERT_NE(model, nullptr);
  auto popts = StagePartitionOptions(Spec(), {16, 8}, 1, 2, at::kFloat, false);
  ASSERT_TRUE(popts.ok());
  popts->memory_budget_bytes = {1024};  // 1 KiB a stage
  auto plan = PlanStages(*model, *popts, 2, 1, /*quiet=*/true);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
  EXPECT_NE(plan.status().message().find("does not fit"), std::string::npos) << plan.status();
}

}  // namespace
}  // namespace baton
