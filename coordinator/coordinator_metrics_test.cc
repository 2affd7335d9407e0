#include "coordinator/coordinator_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "core/metrics/families.h"
#include "core/testing/prometheus_scrape.h"

namespace baton {
namespace {

using test_util::SumSamples;

std::string Scrape() { return prometheus::TextSerializer().Serialize(MetricsRegistry()->Collect()); }

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
