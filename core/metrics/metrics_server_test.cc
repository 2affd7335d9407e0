// The metrics endpoint as Prometheus sees it: a real Exposer on a free port, scraped over HTTP, and every
// family of core/metrics/families.h held to Prometheus' own lint (`promtool check metrics`).
#include "core/metrics/metrics_server.h"

#include <absl/cleanup/cleanup.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <utility>
#include <vector>

#include "core/metrics/families.h"
#include "core/metrics/process_memory.h"
#include "core/testing/prometheus_scrape.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::HttpGet;
using test_util::SumSamples;

TEST(MetricsAddressTest, ParsesHostAndPort) {
  auto a = ParseMetricsAddress("127.0.0.1:9400");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9400);
  auto any = ParseMetricsAddress("0.0.0.0:0");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->port, 0);
  auto local = ParseMetricsAddress("localhost:9400");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->host, "127.0.0.1");
  EXPECT_TRUE(ParseMetricsAddress("[::1]:9400").ok());
}

TEST(MetricsAddressTest, RejectsMalformedAddressesNamingThem) {
  for (const std::string bad : {"9400", "127.0.0.1", ":9400", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000",
                                "127.0.0.1:-1", "example.com:9400", "[zz]:1"}) {
    auto a = ParseMetricsAddress(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(a.status().message().find(absl::StrCat("'", bad, "'")), std::string::npos) << a.status();
  }
}

TEST(MetricsServerTest, ServesTheRegistryOnAFreePort) {
  auto server = MetricsServer::Start("127.0.0.1:0", "stage_worker");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), absl::StrCat("127.0.0.1:", (*server)->port()));
  EXPECT_EQ((*server)->url(), absl::StrCat("http://127.0.0.1:", (*server)->port(), "/metrics"));
  CountRpcError("server", "StageService/Push", "INVALID_ARGUMENT");
  CountRpcError("server", "StageService/Push", "INVALID_ARGUMENT");
  StageFamilies().link_sent_bytes.Add({{"job", "j"}, {"stage", "0"}, {"peer", "stage1"}}).Increment(4096);

  auto body = HttpGet((*server)->address());
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(SumSamples(*body, "baton_rpc_errors_total",
                       {{"side", "server"}, {"method", "StageService/Push"}, {"code", "INVALID_ARGUMENT"}}),
            2);
  EXPECT_EQ(SumSamples(*body, "baton_link_sent_bytes_total", {{"peer", "stage1"}, {"stage", "0"}}), 4096);
  EXPECT_EQ(SumSamples(*body, "baton_build_info", {{"process", "stage_worker"}, {"version", BatonVersion()}}), 1);
  // Read at scrape time: at least the pages this test touched, and what /proc says right now (within 64 MiB).
  const double rss = SumSamples(*body, "baton_process_resident_memory_bytes");
  EXPECT_GT(rss, 1 << 20);
  EXPECT_NEAR(rss, static_cast<double>(ResidentMemoryBytes()), 64 << 20);
  EXPECT_FALSE(HttpGet((*server)->address(), "/nothing").ok());
}

TEST(MetricsServerTest, ABusyPortIsUnavailable) {
  auto first = MetricsServer::Start("127.0.0.1:0", "coordinator");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsServer::Start((*first)->address(), "coordinator");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find((*first)->address()), std::string::npos) << second.status();
}

// Every family with a series, scraped and linted by Prometheus' promtool: names, suffixes, units, help.
TEST(MetricsFamiliesTest, PassPromtoolLint) {
  const std::string promtool = "/usr/bin/promtool";
  if (!PathExists(promtool)) GTEST_SKIP() << "no " << promtool << " (scripts/setup.sh installs prometheus)";
  // The series added here to the process-wide families go again at the end: the suites after this one in the same
  // process (cmake/gtest_suites.py's quick groups) see the families as they were.
  std::vector<std::function<void()>> added;
  const absl::Cleanup remove_added = [&added] {
    for (auto& remove : added) remove();
  };
  auto add = [&added](auto& family, const prometheus::Labels& labels, auto&&... args) -> auto& {
    auto& metric = family.Add(labels, std::forward<decltype(args)>(args)...);
    added.push_back([&family, &metric] { family.Remove(&metric); });
    return metric;
  };
  ProcessMetrics& p = ProcessFamilies();
  add(p.rpc_errors, {{"side", "client"}, {"method", "StageService/RunStep"}, {"code", "UNAVAILABLE"}}).Increment();
  add(p.device_memory_allocated, {{"device", "cuda:0"}}).Set(1);
  const prometheus::Labels job = {{"job", "lint"}};
  CoordinatorMetrics& c = CoordinatorFamilies();
  add(c.steps_completed, job).Increment();
  for (auto* g : {&c.step, &c.steps_target, &c.loss, &c.learning_rate, &c.gradient_norm, &c.samples_per_second,
                  &c.checkpoint_last_success_timestamp_seconds}) {
    add(*g, job).Set(1);
  }
  add(c.step_duration_seconds, job, StepDurationBuckets()).Observe(0.5);
  add(c.checkpoint_duration_seconds, job, CheckpointDurationBuckets()).Observe(0.5);
  add(c.stage_up, {{"job", "lint"}, {"stage", "0"}, {"peer", "127.0.0.1:1"}}).Set(1);
  const prometheus::Labels stage = {{"job", "lint"}, {"stage", "0"}},
                           link = {{"job", "lint"}, {"stage", "0"}, {"peer", "coordinator"}};
  StageMetrics& s = StageFamilies();
  for (auto* f : {&s.forward_seconds, &s.backward_seconds, &s.idle_seconds}) add(*f, stage).Increment(1);
  add(s.microbatches_in_flight, stage).Set(1);
  add(s.worker_configured, stage).Set(1);
  for (auto* f : {&s.link_sent_bytes, &s.link_received_bytes, &s.link_transfer_seconds}) add(*f, link).Increment(1);
  EncoderMetrics& e = EncoderFamilies();
  for (auto* f : {&e.samples_encoded, &e.samples_kept, &e.samples_failed}) add(*f, {}).Increment();
  add(e.sample_seconds, {}, EncoderSampleBuckets()).Observe(0.1);

  auto server = MetricsServer::Start("127.0.0.1:0", "coordinator");
  ASSERT_TRUE(server.ok()) << server.status();
  auto body = HttpGet((*server)->address());
  ASSERT_TRUE(body.ok()) << body.status();
  // Every family declared in families.cc shows up: 4 process + 11 coordinator + 8 stage + 4 encoder.
  int families = 0;
  for (size_t at = body->find("# TYPE baton_"); at != std::string::npos; at = body->find("# TYPE baton_", at + 1)) {
    ++families;
  }
  EXPECT_EQ(families, 27) << *body;
  const std::string file = JoinPath(test_util::MakeTempDir("promtool"), "scrape.txt");
  std::ofstream(file) << *body;
  auto lint = test_util::RunCommand(absl::StrCat(promtool, " check metrics < ", file), /*with_stderr=*/true);
  EXPECT_EQ(lint.exit_code, 0) << lint.output << "\n" << *body;
}

}  // namespace
}  // namespace baton
