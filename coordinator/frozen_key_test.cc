// The one frozen-weights key the job service admits jobs by (stage_driver/configure_request.h: FrozenPipelineKey),
// over real plans of FLUX.2-dev's config (no weights: the planner needs only the config) on two 48 GB CUDA stages
// (the process overhead estimated, not measured: the same cut on every machine): two jobs cut differently by their
// micro-batch size hold different weights on a stage, and are not admitted as sharing; jobs cut alike (another
// learning rate or LoRA dropout) share; and the key is what the stage worker keys its shared tensors by.
#include "rpc/frozen_key.h"

#include <gtest/gtest.h>

#include "coordinator/job_partition.h"
#include "core/testing/paths.h"
#include "core/util/files.h"
#include "stage_driver/configure_request.h"

namespace baton {
namespace {

JobConfig FluxDevJob(int64_t micro_batch_size) {
  JobConfig job;
  job.model = "/models/FLUX.2-dev";
  job.model_config = JoinPath(test_util::SourceDir(), "configs/models/flux2-dev.json");
  job.dtype = "bf16";
  job.devices = {"cuda", "cuda"};
  job.memory_per_stage = {"48GB"};
  job.recompute = RecomputePolicy::kAll;
  job.micro_batches = 2;
  job.batch_size = 2 * micro_batch_size;
  job.lora.rank = 16;
  return job;
}

struct Planned {
  std::vector<std::vector<StageSpec>> plan;
  std::string key;
};

Planned PlanOf(const JobConfig& job) {
  Planned out;
  auto model = OpenModelConfig(job.model_config);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  auto popts = JobPartitionOptions(job, SampleTokens{4096, 512}, 2, at::kBFloat16);
  EXPECT_TRUE(popts.ok()) << popts.status();
  if (!popts.ok()) return out;
  auto plan = PlanStages(**model, std::move(*popts), 2, 1, /*quiet=*/true);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return out;
  out.plan = std::move(*plan);
  out.key = FrozenPipelineKey(PipelineSpecFor(job), out.plan);
  return out;
}

TEST(FrozenKeyTest, JobsCutDifferentlyHoldOtherWeightsAndJobsCutAlikeShare) {
  const Planned one = PlanOf(FluxDevJob(1));
  const Planned two = PlanOf(FluxDevJob(2));  // twice the activations per micro-batch: a block moves to stage 1
  ASSERT_EQ(one.plan.size(), 2u);
  ASSERT_EQ(two.plan.size(), 2u);
  EXPECT_NE(one.plan[0].front().block_end, two.plan[0].front().block_end) << "the larger micro-batch cuts elsewhere";
  EXPECT_NE(one.key, two.key) << "so the stages would hold other blocks: not admitted as sharing";

  JobConfig alike = FluxDevJob(1);
  alike.optimizer.lr = 3e-4;
  alike.lora.dropout = 0.1;
  const Planned same = PlanOf(alike);
  EXPECT_EQ(same.key, one.key) << "the same cut of the same weights: shared";

  JobConfig other_precision = FluxDevJob(1);
  other_precision.quantize = "int8";
  EXPECT_NE(PlanOf(other_precision).key, one.key);
}

TEST(FrozenKeyTest, ThePipelinesKeyIsEveryStagesKeyAsTheStageWorkerMakesIt) {
  const JobConfig job = FluxDevJob(1);
  const Planned planned = PlanOf(job);
  ASSERT_EQ(planned.plan.size(), 2u);
  const PipelineSpec spec = PipelineSpecFor(job);
  const std::vector<std::string> addresses = {"10.0.0.1:7001", "10.0.0.2:7001"};
  std::string stages;
  for (int i = 0; i < 2; ++i) {
    // What the worker is configured with (its neighbours' addresses included) keys its tensors; "" its own device.
    const v1::ConfigureRequest req = ConfigureRequestFor(spec, planned.plan[i], i, addresses, 0, 0);
    stages += (i == 0 ? "" : ";") + FrozenWeightsKey(req, "cpu");
  }
  EXPECT_EQ(stages, planned.key) << "the job's devices name each stage's: the worker's default does not count";
}

}  // namespace
}  // namespace baton
