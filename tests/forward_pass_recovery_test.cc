// A stage worker lost during a forward-only pass (the coordinator's sample images or validation) costs the pass one
// redo, not the run: the pipeline recovers the stage as it does for a training step (StagePipeline::WithRecovery)
// and the redone pass returns bitwise the outputs of the pass before the loss; training goes on afterwards.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <mutex>

#include "coordinator/job_plan.h"
#include "coordinator/run_types.h"
#include "coordinator/step_inputs.h"
#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/util/files.h"
#include "stage_driver/stage_pipeline.h"
#include "stage_driver/stage_set.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

TEST(ForwardPassRecoveryTest, KilledWorkerDuringAPassIsRestartedAndThePassRedone) {
  const std::string dir = test_util::MakeTempDir("fwdpass_recovery");
  Flux2Config c = test_util::TinyFlux2Config();
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "model"), 1).ok());
  ASSERT_TRUE(
      WriteSyntheticCache(JoinPath(dir, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
          .ok());
  auto job = ParseJobYaml(absl::StrCat("model: ", JoinPath(dir, "model"), "\ndataset: ", JoinPath(dir, "cache"),
                                       "\nlora: {rank: 4, targets: all-linear, dropout: 0.1}\n"
                                       "steps: 2\nbatch_size: 4\nmicro_batches: 2\nschedule: 1f1b\nseed: 3\n"));
  ASSERT_TRUE(job.ok()) << job.status();
  CoordinatorOptions o = test_util::LocalStagesOptions(2, JoinPath(dir, "out"));
  std::mutex mu;
  std::vector<std::pair<int64_t, int>> recoveries;  // (step, stage)
  o.hooks.on_recovery = [&](int64_t step, int stage, const std::string&) {
    std::lock_guard<std::mutex> lock(mu);
    recoveries.emplace_back(step, stage);
  };

  auto setup = SetUpJob(*job, o);
  ASSERT_TRUE(setup.ok()) << setup.status();
  StepSlice slice;  // the whole step
  slice.schedule = setup->schedule;
  FleetSettings settings;
  settings.loss_scale = 1.0f / static_cast<float>(setup->micro_batches);
  settings.stall_timeout = o.stall_timeout;
  StagePipeline pipeline(
      PipelineSpecFor(*job), o, setup->plans[0], settings, [] { return false; }, o.hooks.on_recovery);
  ASSERT_TRUE(pipeline.Start().ok());
  auto seeded = pipeline.Adapters();
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  std::map<std::string, at::Tensor> master;
  for (auto& [name, t] : *seeded) master[name] = t + 0.01;
  auto inputs = PrepareStepInputs(*setup, 0);
  ASSERT_TRUE(inputs.ok()) << inputs.status();

  auto first = pipeline.RunForwardPass(0, 1, inputs->shell, master);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), inputs->shell.size());

  ASSERT_TRUE(pipeline.local()->Kill(1, SIGKILL).ok());
  auto redone = pipeline.RunForwardPass(0, 2, inputs->shell, master);
  ASSERT_TRUE(redone.ok()) << redone.status();  // the stage-0 log names "pass 2 (after step 0)"
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(recoveries.size(), 1u);
    EXPECT_EQ(recoveries[0], std::make_pair(int64_t{0}, 1));
  }
  ASSERT_EQ(redone->size(), first->size());
  for (size_t mb = 0; mb < first->size(); ++mb) EXPECT_TRUE(at::equal((*redone)[mb], (*first)[mb])) << mb;

  // Training goes on with the restarted stage.
  auto step = pipeline.RunStep(0, slice, *inputs, master);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(std::isfinite(step->summaries.back().losses(0)));
  EXPECT_TRUE(pipeline.Stop().ok());
}

}  // namespace
}  // namespace baton
