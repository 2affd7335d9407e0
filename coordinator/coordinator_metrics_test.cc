#include "coordinator/coordinator_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <nlohmann/json.hpp>

#include "core/metrics/families.h"
#include "core/testing/prometheus_scrape.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::SumSamples;

std::string Scrape() { return prometheus::TextSerializer().Serialize(MetricsRegistry()->Collect()); }

TEST(CoordinatorMetricsTest, StageWorkersGetTheNextPortsOrFreeOnes) {
  EXPECT_EQ(*StageMetricsListen("127.0.0.1:9400", 0), "127.0.0.1:9401");
  EXPECT_EQ(*StageMetricsListen("127.0.0.1:9400", 2), "127.0.0.1:9403");
  EXPECT_EQ(*StageMetricsListen("0.0.0.0:0", 5), "0.0.0.0:0");
  auto past = StageMetricsListen("127.0.0.1:65535", 0);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("65536"), std::string::npos) << past.status();
  EXPECT_FALSE(StageMetricsListen("127.0.0.1", 0).ok());
}

TEST(CoordinatorMetricsTest, TargetsFileIsPrometheusFileSd) {
  const std::string dir = JoinPath(test_util::MakeTempDir("targets"), "out");
  testing::internal::CaptureStdout();
  ASSERT_TRUE(PublishMetricsTargets(dir, "127.0.0.1:9400", {"127.0.0.1:9401", "", "127.0.0.1:9403"}, true).ok());
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "metrics: coordinator 127.0.0.1:9400, stage 0 127.0.0.1:9401, stage 2 127.0.0.1:9403\n");
  auto text = ReadFile(JoinPath(dir, "prometheus_targets.json"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(nlohmann::json::parse(*text), nlohmann::json::parse(R"([
    {"targets": ["127.0.0.1:9400"], "labels": {"baton_process": "coordinator"}},
    {"targets": ["127.0.0.1:9401"], "labels": {"baton_process": "stage_worker", "stage": "0"}},
    {"targets": ["127.0.0.1:9403"], "labels": {"baton_process": "stage_worker", "stage": "2"}}])"));
}

TEST(CoordinatorMetricsTest, HooksUpdateTheFamiliesAndKeepTheHooksAlreadyThere) {
  CoordinatorHooks hooks;
  int steps_seen = 0, checkpoints_seen = 0, starts_seen = 0;
  hooks.on_start = [&](const RunStart&) { ++starts_seen; };
  hooks.on_step = [&](const PipelineStepRecord&) { ++steps_seen; };
  hooks.on_checkpoint = [&](int64_t, double) { ++checkpoints_seen; };
  AddMetricsHooks("hooks-test", &hooks);
  hooks.on_start({"hash", 4, 10, {"a:1", "b:2"}});
  for (int64_t s = 5; s <= 6; ++s) {
    PipelineStepRecord rec;
    rec.step = s;
    rec.loss = 0.25 * static_cast<double>(s);
    rec.lr = 1e-4;
    rec.grad_norm = 2.5;
    rec.step_seconds = 0.3;
    rec.samples_per_second = 12;
    hooks.on_step(rec);
  }
  hooks.on_checkpoint(6, 0.7);
  EXPECT_EQ(starts_seen, 1);
  EXPECT_EQ(steps_seen, 2);
  EXPECT_EQ(checkpoints_seen, 1);

  const std::string text = Scrape();
  const std::map<std::string, std::string> job = {{"job", "hooks-test"}};
  EXPECT_EQ(SumSamples(text, "baton_steps_target", job), 10);
  EXPECT_EQ(SumSamples(text, "baton_step", job), 6);
  EXPECT_EQ(SumSamples(text, "baton_steps_completed_total", job), 2);
  EXPECT_EQ(SumSamples(text, "baton_loss", job), 1.5);
  EXPECT_EQ(SumSamples(text, "baton_learning_rate", job), 1e-4);
  EXPECT_EQ(SumSamples(text, "baton_gradient_norm", job), 2.5);
  EXPECT_EQ(SumSamples(text, "baton_samples_per_second", job), 12);
  EXPECT_EQ(SumSamples(text, "baton_step_duration_seconds_count", job), 2);
  EXPECT_NEAR(SumSamples(text, "baton_step_duration_seconds_sum", job), 0.6, 1e-12);
  EXPECT_EQ(SumSamples(text, "baton_checkpoint_duration_seconds_count", job), 1);
  EXPECT_GT(SumSamples(text, "baton_checkpoint_last_success_timestamp_seconds", job), 1.7e9);
}

}  // namespace
}  // namespace baton
