#include "stage_driver/stage_metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

TEST(StageMetricsTest, StageWorkersGetTheNextPortsOrFreeOnes) {
  EXPECT_EQ(*StageMetricsListen("127.0.0.1:9400", 0), "127.0.0.1:9401");
  EXPECT_EQ(*StageMetricsListen("127.0.0.1:9400", 2), "127.0.0.1:9403");
  EXPECT_EQ(*StageMetricsListen("0.0.0.0:0", 5), "0.0.0.0:0");
  auto past = StageMetricsListen("127.0.0.1:65535", 0);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("65536"), std::string::npos) << past.status();
  EXPECT_FALSE(StageMetricsListen("127.0.0.1", 0).ok());
}

TEST(StageMetricsTest, TargetsFileIsPrometheusFileSd) {
  const std::string dir = JoinPath(test_util::MakeTempDir("targets"), "out");
  testing::internal::CaptureStdout();
  ASSERT_TRUE(
      PublishMetricsTargets(dir, "trainer", "127.0.0.1:9400", {"127.0.0.1:9401", "", "127.0.0.1:9403"}, true).ok());
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "metrics: trainer 127.0.0.1:9400, stage 0 127.0.0.1:9401, stage 2 127.0.0.1:9403\n");
  auto text = ReadFile(JoinPath(dir, "prometheus_targets.json"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(nlohmann::json::parse(*text), nlohmann::json::parse(R"([
    {"targets": ["127.0.0.1:9400"], "labels": {"baton_process": "trainer"}},
    {"targets": ["127.0.0.1:9401"], "labels": {"baton_process": "stage_worker", "stage": "0"}},
    {"targets": ["127.0.0.1:9403"], "labels": {"baton_process": "stage_worker", "stage": "2"}}])"));
}

}  // namespace
}  // namespace baton
