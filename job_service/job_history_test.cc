#include "job_service/job_history.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

std::vector<v1::StepProgress> Steps(int n) {
  std::vector<v1::StepProgress> steps;
  for (int i = 1; i <= n; ++i) {
    v1::StepProgress s;
    s.set_step(i);
    s.set_loss(i % 2 == 0 ? 1.0 : 3.0);
    s.set_learning_rate(0.001 * i);
    s.set_grad_norm(i);
    s.set_step_seconds(0.5);
    s.set_link_bytes(100 * i);
    steps.push_back(s);
  }
  return steps;
}

TEST(DownsampleStepsTest, OnePointPerStepUpToTheCap) {
  auto points = DownsampleSteps(Steps(7), 7);
  ASSERT_EQ(points.size(), 7u);
  EXPECT_EQ(points[2].step(), 3);
  EXPECT_EQ(points[2].first_step(), 3);
  EXPECT_DOUBLE_EQ(points[2].loss(), 3.0);
  EXPECT_EQ(points[2].link_bytes(), 300);
  EXPECT_TRUE(DownsampleSteps({}, 10).empty());
}

TEST(DownsampleStepsTest, MoreStepsComeInRunsWithTheirMeanMinAndMax) {
  auto points = DownsampleSteps(Steps(100001), 2000);
  ASSERT_LE(points.size(), 2000u);
  ASSERT_EQ(points.size(), 1961u);  // runs of ceil(100001 / 2000) = 51 steps
  EXPECT_EQ(points[0].first_step(), 1);
  EXPECT_EQ(points[0].step(), 51);
  EXPECT_DOUBLE_EQ(points[0].loss(), (26 * 3.0 + 25 * 1.0) / 51);
  EXPECT_DOUBLE_EQ(points[0].loss_min(), 1.0);
  EXPECT_DOUBLE_EQ(points[0].loss_max(), 3.0);
  EXPECT_DOUBLE_EQ(points[0].grad_norm(), 26.0);
  EXPECT_DOUBLE_EQ(points[0].learning_rate(), 0.051);
  EXPECT_EQ(points.back().step(), 100001);
  EXPECT_EQ(DownsampleSteps(Steps(5), 0).size(), 5u);  // 0: the default cap
}

TEST(ReadTrainLogHistoryTest, ReadsStepsValidationsAndSamplesAndSkipsTheRest) {
  const std::string dir = test_util::MakeTempDir("job-history");
  const std::string log = JoinPath(dir, "train_log.jsonl");
  ASSERT_TRUE(WriteFileAtomic(log,
                              R"({"step":0,"event":"validation","validation_loss":{"0.9":2.5,"0.1":1.5,"mean":2.0}}
{"step":0,"event":"samples","dir":"d","contact_sheet":"d/contact_sheet.png","images":2,"seconds_per_sample":0.4}
{"step":1,"loss":2.8,"lr":0.001,"grad_norm":0.3,"step_seconds":0.25,"samples_per_second":16,"stage_busy_seconds":[0.1,0.2],"stage_idle_seconds":[0.05,0.01],"stage_memory_bytes":[1000,2000],"coordinator_link_bytes":{"data":1000,"control":24}}
not json
{"step":"two","loss":1}
{"step":2,"loss":2.7,"lr":0.002,"grad_norm":0.2,"step_seconds":0.75}
)")
                  .ok());
  LoggedHistory h = ReadTrainLogHistory(log, 10);
  ASSERT_EQ(h.steps.size(), 2u);
  EXPECT_EQ(h.steps[0].step(), 1);
  EXPECT_EQ(h.steps[0].total_steps(), 10);
  EXPECT_DOUBLE_EQ(h.steps[0].loss(), 2.8);
  EXPECT_EQ(h.steps[0].link_bytes(), 1024);
  ASSERT_EQ(h.steps[0].stages_size(), 2);
  EXPECT_DOUBLE_EQ(h.steps[0].stages(1).busy_seconds(), 0.2);
  EXPECT_EQ(h.steps[0].stages(1).memory_bytes(), 2000);
  EXPECT_DOUBLE_EQ(h.run_seconds, 1.0);
  ASSERT_EQ(h.evals.size(), 2u);
  ASSERT_TRUE(h.evals[0].has_validation());
  EXPECT_EQ(std::vector<double>(h.evals[0].validation().timesteps().begin(), h.evals[0].validation().timesteps().end()),
            (std::vector<double>{0.1, 0.9}));
  EXPECT_DOUBLE_EQ(h.evals[0].validation().losses(0), 1.5);
  EXPECT_DOUBLE_EQ(h.evals[0].validation().mean(), 2.0);
  ASSERT_TRUE(h.evals[1].has_samples());
  EXPECT_EQ(h.evals[1].samples().images(), 2);
  EXPECT_TRUE(ReadTrainLogHistory(JoinPath(dir, "missing.jsonl"), 1).steps.empty());
}

// ema.evals: the page shows the trained adapters' evaluations (both), or the EMA's when there are no others (ema).
TEST(ReadTrainLogHistoryTest, TheEmaValidationsShowBesideTheOthersAndItsRenderingsWhenTheRunMadeNoOthers) {
  const std::string dir = test_util::MakeTempDir("job-history-ema");
  const std::string both = JoinPath(dir, "both.jsonl"), ema = JoinPath(dir, "ema.jsonl");
  ASSERT_TRUE(WriteFileAtomic(both, R"({"step":0,"event":"validation","validation_loss":{"0.5":2.5,"mean":2.5}}
{"step":0,"event":"samples","dir":"d","contact_sheet":"c","images":2,"seconds_per_sample":0.4}
{"step":0,"event":"validation","weights":"ema","validation_loss":{"0.5":1.5,"mean":1.5}}
{"step":0,"event":"samples","weights":"ema","dir":"d-ema","contact_sheet":"c-ema","images":2,"seconds_per_sample":0.4}
)")
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomic(ema, R"({"step":0,"event":"validation","weights":"ema","validation_loss":{"0.5":1.5,"mean":1.5}}
)")
          .ok());
  LoggedHistory h = ReadTrainLogHistory(both, 10);
  ASSERT_EQ(h.evals.size(), 3u);
  EXPECT_DOUBLE_EQ(h.evals[0].validation().mean(), 2.5);
  EXPECT_FALSE(h.evals[0].validation().ema());
  EXPECT_EQ(h.evals[1].samples().contact_sheet(), "c");
  EXPECT_DOUBLE_EQ(h.evals[2].validation().mean(), 1.5);
  EXPECT_TRUE(h.evals[2].validation().ema());
  h = ReadTrainLogHistory(ema, 10);
  ASSERT_EQ(h.evals.size(), 1u);
  EXPECT_DOUBLE_EQ(h.evals[0].validation().mean(), 1.5);
  EXPECT_FALSE(h.evals[0].validation().ema()) << "the run's only validations";
}

TEST(ListSampleRenderingTest, ListsTheFilesOfPromptsTxtThatExist) {
  const std::string out = test_util::MakeTempDir("job-history-samples");
  const std::string dir = JoinPath(out, "samples/step-4");
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "prompts.txt"),
                              "0.mp4\ta red circle\n1.mp4\ta yellow\tsquare\n"
                              "2.png\tnever written\n../x.png\tescape\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "0.mp4"), "v").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "1.mp4"), "v").ok());
  v1::SamplesProgress samples;
  samples.set_step(4);
  samples.set_images(2);
  v1::SampleRendering r = ListSampleRendering(out, samples);
  EXPECT_EQ(r.step(), 4);
  ASSERT_EQ(r.files_size(), 2);
  EXPECT_EQ(r.files(0).name(), "0.mp4");
  EXPECT_TRUE(r.files(0).video());
  EXPECT_EQ(r.files(1).prompt(), "a yellow\tsquare");
}

TEST(TailLinesTest, TheLastLinesOldestFirst) {
  const std::string dir = test_util::MakeTempDir("job-history-tail");
  const std::string path = JoinPath(dir, "log");
  std::string text;
  for (int i = 0; i < 500; ++i) absl::StrAppend(&text, "line ", i, "\n");
  ASSERT_TRUE(WriteFileAtomic(path, text).ok());
  auto tail = TailLines(path, 3);
  EXPECT_EQ(tail, (std::vector<std::string>{"line 497", "line 498", "line 499"}));
  EXPECT_EQ(TailLines(path, 1000).size(), static_cast<size_t>(kMaxLogTailLines));
  EXPECT_TRUE(TailLines(path, 0).empty());
  EXPECT_TRUE(TailLines(JoinPath(dir, "missing"), 5).empty());
}

}  // namespace
}  // namespace baton
