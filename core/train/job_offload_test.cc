// The job key offload (block swap): `auto` or `{blocks: N}`, every refusal naming file:line and why.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <string>

#include "core/train/job.h"

namespace baton {
namespace {

constexpr char kOffloadBase[] = "model: m\ndataset: d\nsteps: 4\n";

absl::StatusOr<JobConfig> ParseOffloadJob(const std::string& keys) {
  return ParseJobYaml(absl::StrCat(kOffloadBase, keys), "jobs/swap.yaml");
}

void ExpectOffloadRefused(const std::string& keys, const std::string& where, const std::string& what) {
  auto job = ParseOffloadJob(keys);
  ASSERT_FALSE(job.ok()) << "accepted: " << keys;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message().rfind(where, 0), 0u) << job.status();
  EXPECT_NE(job.status().message().find(what), std::string::npos) << job.status();
}

TEST(JobOffloadTest, TakesAutoOrABlockCount) {
  auto none = ParseOffloadJob("");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->offload_blocks, 0);
  auto automatic = ParseOffloadJob("offload: auto\n");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->offload_blocks, JobConfig::kOffloadAuto);
  auto three = ParseOffloadJob("recompute: true\noffload: {blocks: 3}\n");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->offload_blocks, 3);
}

TEST(JobOffloadTest, RefusesWhatCannotSwapNamingFileAndLine) {
  ExpectOffloadRefused("offload: lots\n", "jobs/swap.yaml:4", "must be auto");
  ExpectOffloadRefused("offload: {blocks: -1}\n", "jobs/swap.yaml:4", "must be 0..1000");
  ExpectOffloadRefused("offload: {blocks: 2, buffers: 3}\n", "jobs/swap.yaml:4", "buffers");
  ExpectOffloadRefused("offload: {}\n", "jobs/swap.yaml:4", "needs blocks: N");
  ExpectOffloadRefused("recompute: false\noffload: {blocks: 2}\n", "jobs/swap.yaml:5", "needs recompute auto or true");
  ExpectOffloadRefused("schedule: interleaved\noffload: auto\n", "jobs/swap.yaml:5", "needs schedule gpipe or 1f1b");
}

}  // namespace
}  // namespace baton
