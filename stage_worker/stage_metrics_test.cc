#include "stage_worker/stage_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <memory>

#include "core/metrics/families.h"
#include "core/testing/prometheus_scrape.h"

namespace baton {
namespace {

using test_util::SumSamples;

std::string Scrape() { return prometheus::TextSerializer().Serialize(MetricsRegistry()->Collect()); }

TEST(StageMetricsTest, PeerLabelFromTheEnvelopeSender) {
  EXPECT_EQ(StageInstruments::PeerLabel("stage 1 (10.0.0.2:7001)"), "stage1");
  EXPECT_EQ(StageInstruments::PeerLabel("stage 12 (host:1)"), "stage12");
  EXPECT_EQ(StageInstruments::PeerLabel("coordinator"), "coordinator");
  EXPECT_EQ(StageInstruments::PeerLabel("stage x"), "coordinator");
  EXPECT_EQ(StageInstruments::PeerLabel(""), "coordinator");
}

TEST(StageMetricsTest, CountsOnlyOnceConfiguredAndUnderTheJobAndStage) {
  constexpr char kJob[] = "stage-metrics-dog";  // a name no other test of this process binds
  // The counters are the process's: another test's pipelines may have left series (counters never go back).
  std::string text = Scrape();
  const double forward_before = SumSamples(text, "baton_stage_forward_seconds_total");
  const double sent_before = SumSamples(text, "baton_link_sent_bytes_total");
  StageInstruments m;
  m.AddForwardSeconds(5);  // not configured: dropped
  m.Link("stage1").Sent(100, 1);
  text = Scrape();
  EXPECT_EQ(SumSamples(text, "baton_worker_configured", {{"job", ""}, {"stage", ""}}), 0);
  EXPECT_EQ(SumSamples(text, "baton_stage_forward_seconds_total"), forward_before);
  EXPECT_EQ(SumSamples(text, "baton_link_sent_bytes_total"), sent_before);

  m.Configure(kJob, 1);
  m.AddForwardSeconds(0.5);
  m.AddBackwardSeconds(1.25);
  m.AddIdleSeconds(0.125);
  m.SetInFlight(3);
  m.Link("stage2").Sent(1000, 0.5);
  m.Link("stage0").Received(700, 0.25);
  m.Link("stage0").Received(300, 0.25);
  text = Scrape();
  const std::map<std::string, std::string> labels = {{"job", kJob}, {"stage", "1"}};
  EXPECT_EQ(SumSamples(text, "baton_worker_configured"), 1) << "the unconfigured series is gone:\n" << text;
  EXPECT_EQ(SumSamples(text, "baton_worker_configured", labels), 1);
  EXPECT_EQ(SumSamples(text, "baton_stage_forward_seconds_total", labels), 0.5);
  EXPECT_EQ(SumSamples(text, "baton_stage_backward_seconds_total", labels), 1.25);
  EXPECT_EQ(SumSamples(text, "baton_stage_idle_seconds_total", labels), 0.125);
  EXPECT_EQ(SumSamples(text, "baton_microbatches_in_flight", labels), 3);
  EXPECT_EQ(SumSamples(text, "baton_link_sent_bytes_total", {{"job", kJob}, {"stage", "1"}, {"peer", "stage2"}}), 1000);
  EXPECT_EQ(SumSamples(text, "baton_link_received_bytes_total", {{"job", kJob}, {"peer", "stage0"}}), 1000);
  EXPECT_EQ(SumSamples(text, "baton_link_transfer_seconds_total", {{"job", kJob}, {"peer", "stage0"}}), 0.5);

  m.Configure("", 0);  // another job: a worker shows only its current binding as configured
  text = Scrape();
  EXPECT_EQ(SumSamples(text, "baton_worker_configured"), 1);
  EXPECT_EQ(SumSamples(text, "baton_worker_configured", {{"job", "unnamed"}, {"stage", "0"}, {"replica", "0"}}), 1);

  m.Configure(kJob, 0, /*replica=*/1);  // stage 0 of the second data-parallel replica
  m.AddForwardSeconds(0.25);
  text = Scrape();
  EXPECT_EQ(SumSamples(text, "baton_worker_configured", {{"job", kJob}, {"stage", "0"}, {"replica", "1"}}), 1);
  EXPECT_EQ(SumSamples(text, "baton_stage_forward_seconds_total", {{"job", kJob}, {"stage", "0"}, {"replica", "1"}}),
            0.25);
}

// Pipelines on one shared worker: one that goes (released) takes its gauges with it; two bound to the same labels
// (the same job name submitted twice) share them until the last one goes.
TEST(StageMetricsTest, AReleasedPipelinesGaugesGoWithItAndSharedLabelsStayUntilTheLast) {
  const std::map<std::string, std::string> cat = {{"job", "cat"}, {"stage", "0"}, {"replica", "0"}};
  auto first = std::make_unique<StageInstruments>();
  auto second = std::make_unique<StageInstruments>();
  first->Configure("cat", 0);
  second->Configure("cat", 0);
  {
    StageInstruments other;
    other.Configure("owl", 0);
    other.SetInFlight(2);
    EXPECT_EQ(SumSamples(Scrape(), "baton_worker_configured", {{"job", "owl"}}), 1);
  }
  std::string text = Scrape();
  EXPECT_EQ(SumSamples(text, "baton_worker_configured", {{"job", "owl"}}), -1) << text;
  EXPECT_EQ(SumSamples(text, "baton_microbatches_in_flight", {{"job", "owl"}}), -1) << text;

  first.reset();
  second->SetInFlight(4);  // its gauges are still there, not removed with the first one's binding
  text = Scrape();
  EXPECT_EQ(SumSamples(text, "baton_worker_configured", cat), 1) << text;
  EXPECT_EQ(SumSamples(text, "baton_microbatches_in_flight", cat), 4) << text;
  second.reset();
  EXPECT_EQ(SumSamples(Scrape(), "baton_worker_configured", cat), -1);
}

}  // namespace
}  // namespace baton
