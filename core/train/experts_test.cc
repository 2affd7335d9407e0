#include "core/train/experts.h"

#include <gtest/gtest.h>

#include "core/encode/wan_encoder.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

JobConfig BothJob(const std::string& model) {
  auto job =
      ParseJobYaml("model: " + model + "\ndataset: cache\nexpert: both\ntimesteps: {shift: 3}\nsteps: 40\nseed: 5\n");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

TEST(ExpertsTest, BothSplitsTheStepsAtTheBoundaryIntoOneRunPerExpert) {
  const std::string dir = test_util::MakeTempDir("experts_plan");
  ASSERT_TRUE(WriteTinyWanPipeline(dir, 1, "i2v-a14b").ok());
  const JobConfig job = BothJob(dir);
  auto runs = PlanExpertRuns(job, "out", 40);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  const ExpertRun& high = (*runs)[0];
  const ExpertRun& low = (*runs)[1];
  EXPECT_EQ(high.job.model, JoinPath(dir, "transformer"));
  EXPECT_EQ(low.job.model, JoinPath(dir, "transformer_2"));
  EXPECT_EQ(high.output_dir, "out/high_noise");
  EXPECT_DOUBLE_EQ(high.job.timesteps.min, 0.9);
  EXPECT_DOUBLE_EQ(low.job.timesteps.max, 0.9);
  EXPECT_EQ(high.steps + low.steps, 40);
  int64_t drawn_high = 0;
  for (int64_t s = 0; s < 40; ++s) drawn_high += StepTrainsHighNoiseExpert(job, s, 0.9) ? 1 : 0;
  EXPECT_EQ(high.steps, drawn_high);
  EXPECT_GT(high.steps, 0);  // shift 3: a quarter of the draws reach 0.9
  EXPECT_LT(high.steps, 20);
  auto one = PlanExpertRuns(
      [&] {
        JobConfig j = job;
        j.expert = "low";
        return j;
      }(),
      "out", 40);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].steps, 40);
  EXPECT_EQ((*one)[0].output_dir, "out");
}

TEST(ExpertsTest, BothRefusesWhatWouldBreakTheSplit) {
  const std::string dir = test_util::MakeTempDir("experts_refusals");
  ASSERT_TRUE(WriteTinyWanPipeline(dir, 1, "i2v-a14b").ok());
  JobConfig ranged = BothJob(dir);
  ranged.timesteps.max = 0.5;
  EXPECT_FALSE(PlanExpertRuns(ranged, "out", 4).ok());
  JobConfig sized = BothJob(dir);
  sized.timesteps.shift = "flux2_empirical";
  EXPECT_FALSE(PlanExpertRuns(sized, "out", 4).ok());
  const std::string single = test_util::MakeTempDir("experts_single");
  ASSERT_TRUE(WriteTinyWanPipeline(single, 1, "i2v").ok());
  const absl::Status one = PlanExpertRuns(BothJob(single), "out", 4).status();
  EXPECT_NE(one.message().find("holds one transformer"), std::string::npos) << one;
  EXPECT_FALSE(ParseJobYaml("model: m\ndataset: c\nexpert: medium\n").ok());
}

}  // namespace
}  // namespace baton
