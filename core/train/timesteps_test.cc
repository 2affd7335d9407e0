#include "core/train/timesteps.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/train/job.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<JobConfig> JobWithTimesteps(const std::string& timesteps) {
  return ParseJobYaml("model: m\ndataset: d\n" + (timesteps.empty() ? "" : "timesteps: " + timesteps + "\n"), "j.yaml");
}

TEST(TimestepsTest, DefaultsAreTheDiffusersFlux2Trainers) {
  auto job = JobWithTimesteps("");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->timesteps.sampling, "none");
  EXPECT_EQ(job->timesteps.logit_mean, 0.0);
  EXPECT_EQ(job->timesteps.logit_std, 1.0);
  EXPECT_EQ(job->timesteps.mode_scale, 1.29);
  EXPECT_EQ(job->timesteps.shift, "none");
  EXPECT_EQ(job->timesteps.shift_steps, 50);
}

TEST(TimestepsTest, JobParsingAcceptsTheSchemesAndRejectsNonsense) {
  auto alias = JobWithTimesteps("{sampling: uniform}");
  ASSERT_TRUE(alias.ok()) << alias.status();
  EXPECT_EQ(alias->timesteps.sampling, "none");
  for (const char* ok : {"{sampling: logit_normal, logit_mean: -0.5, logit_std: 2}", "{sampling: mode, mode_scale: 0}",
                         "{shift: flux2_empirical, shift_steps: 28}", "{shift: flux1_linear}", "{shift: 3.0}"}) {
    EXPECT_TRUE(JobWithTimesteps(ok).ok()) << ok;
  }
  struct Bad {
    std::string yaml, needle;
  };
  for (const Bad& bad : std::vector<Bad>{{"{sampling: cosmap}", "sampling"},
                                         {"{sampling: mode, mode_scale: 1.8}", "mode_scale"},
                                         {"{sampling: mode, mode_scale: -1.5}", "mode_scale"},
                                         {"{logit_std: 0}", "logit_std"},
                                         {"{shift: auto}", "flux1_linear"},
                                         {"{shift: -1}", "shift"},
                                         {"{shift: 2x}", "shift"},
                                         {"{shift: flux2_empirical, shift_steps: 0}", "shift_steps"},
                                         {"{weighting: none}", "unknown key"}}) {
    auto job = JobWithTimesteps(bad.yaml);
    ASSERT_FALSE(job.ok()) << bad.yaml;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(bad.needle)) << bad.yaml;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr("j.yaml:3")) << bad.yaml;
  }
}

TEST(TimestepsTest, SigmaIsTheSchedulerTableEntry) {
  // indices = (u·1000).long(), sigma = (1000 − index)/1000; u = 1 would index past the table, so it clamps.
  at::Tensor u = at::tensor({0.0f, 0.0005f, 0.001f, 0.5f, 0.9994f, 0.9999f, 1.0f});
  at::Tensor expected = at::tensor({1.0f, 1.0f, 0.999f, 0.5f, 0.001f, 0.001f, 0.001f});
  EXPECT_TRUE(at::equal(DensityToSigma(u), expected)) << DensityToSigma(u);
}

TEST(TimestepsTest, MuFormulasMatchDiffusersValues) {
  // compute_empirical_mu(n, steps) printed by diffusers 0.42.1 (Python floats); the > 4300 branch ignores steps.
  EXPECT_NEAR(Flux2EmpiricalMu(256, 50), 1.6216074698534737, 1e-13);
  EXPECT_NEAR(Flux2EmpiricalMu(1024, 28), 1.8591765771805644, 1e-13);
  EXPECT_NEAR(Flux2EmpiricalMu(4096, 50), 2.0233511571292637, 1e-13);
  EXPECT_NEAR(Flux2EmpiricalMu(4608, 50), 1.23666282, 1e-13);
  EXPECT_NEAR(Flux1LinearMu(256), 0.5, 1e-13);
  EXPECT_NEAR(Flux1LinearMu(1024), 0.63, 1e-13);
  EXPECT_NEAR(Flux1LinearMu(4096), 1.15, 1e-13);
  EXPECT_NEAR(ShiftTimesteps(at::tensor({0.5}, at::kDouble), 3.0).item<double>(), 0.75, 1e-15);
  TimestepConfig c;
  c.shift = "flux2_empirical";
  EXPECT_NEAR(TimestepShift(c, 1024), std::exp(Flux2EmpiricalMu(1024, 50)), 1e-12);
  c.shift = "2.5";
  EXPECT_EQ(TimestepShift(c, 1024), 2.5);
  c.shift = "none";
  EXPECT_EQ(TimestepShift(c, 1024), 1.0);
}

// Sample moments of 20000 draws; the standard error of a mean of values in [0, 1] is < 0.5/sqrt(20000) = 0.0035,
// so 0.01 is three standard errors.
TEST(TimestepsTest, SchemesHaveTheirDistributions) {
  auto mean_of = [](const TimestepConfig& c, int64_t tokens = 256) {
    auto gen = at::detail::createCPUGenerator(123);
    at::Tensor t = SampleTimesteps(c, 20000, tokens, gen);
    EXPECT_GE(t.min().item<float>(), 0.001f);
    EXPECT_LE(t.max().item<float>(), 1.0f);
    return t.mean().item<double>();
  };
  TimestepConfig c;
  EXPECT_NEAR(mean_of(c), 0.5005, 0.01);  // uniform over the table {0.001, ..., 1}
  c.sampling = "logit_normal";
  EXPECT_NEAR(mean_of(c), 0.5, 0.01);
  c.logit_mean = 1.0;  // diffusers' sign: positive mean, less noise
  EXPECT_LT(mean_of(c), 0.35);
  c = TimestepConfig();
  c.sampling = "mode";
  const double mode_mean = mean_of(c);
  EXPECT_NEAR(mode_mean, 0.5, 0.01);  // symmetric about 1/2
  c.shift = "3";
  EXPECT_GT(mean_of(c), 0.6);  // shift > 1 moves t toward noise
  // mode with mode_scale 0 is plain uniform (u = 1 − v).
  c = TimestepConfig();
  c.sampling = "mode";
  c.mode_scale = 0;
  EXPECT_NEAR(mean_of(c), 0.5005, 0.01);
}

TEST(TimestepsTest, SameGeneratorStateSameDraws) {
  TimestepConfig c;
  c.sampling = "logit_normal";
  auto a = at::detail::createCPUGenerator(5), b = at::detail::createCPUGenerator(5);
  EXPECT_TRUE(at::equal(SampleTimesteps(c, 16, 64, a), SampleTimesteps(c, 16, 64, b)));
}

}  // namespace
// A Wan 2.2 A14B expert trains only its side of the boundary: t mapped linearly into [min, max]; the default range
// leaves the draw bitwise as it was.
TEST(TimestepsTest, RangeMapsTheDrawIntoAnExpertsSideOfTheBoundary) {
  TimestepConfig full;
  TimestepConfig high = full;
  high.min = 0.875;
  auto draw = [](const TimestepConfig& c) {
    auto gen = at::detail::createCPUGenerator(7);
    return SampleTimesteps(c, 4096, 256, gen);
  };
  const at::Tensor t = draw(full);
  const at::Tensor h = draw(high);
  EXPECT_GE(h.min().item<double>(), 0.875);
  EXPECT_LE(h.max().item<double>(), 1.0);
  EXPECT_TRUE(at::allclose(h, t * 0.125 + 0.875));
  EXPECT_TRUE(at::equal(draw(TimestepConfig{}), t));

  auto job = ParseJobYaml("model: m\ndataset: d\ntimesteps: {min: 0.0, max: 0.875}\n");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->timesteps.max, 0.875);
  EXPECT_FALSE(ParseJobYaml("model: m\ndataset: d\ntimesteps: {min: 0.9, max: 0.5}\n").ok());
}

}  // namespace baton
