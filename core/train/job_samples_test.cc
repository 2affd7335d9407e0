// The samples: keys for Wan videos (core/train/job.h SamplesConfig): frames, negative_prompt, image are read, default
// when absent, and refused with the key named when frames is not 4k + 1.
#include <gtest/gtest.h>

#include <string>

#include "core/train/job.h"

namespace baton {
namespace {

constexpr char kSamplesJobBase[] = "model: m\ndataset: d\nsteps: 4\n";

absl::StatusOr<JobConfig> Parse(const std::string& samples) {
  return ParseJobYaml(std::string(kSamplesJobBase) + "samples: {every: 2, prompts: [a dog]" + samples + "}\n",
                      "jobs/v.yaml");
}

TEST(JobSamplesTest, WanKeysAreRead) {
  auto job = Parse(", frames: 9, negative_prompt: blurry, image: data/first.png");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->samples.frames, 9);
  EXPECT_EQ(job->samples.negative_prompt, "blurry");
  EXPECT_EQ(job->samples.image, "data/first.png");
}

TEST(JobSamplesTest, WanKeysDefault) {
  auto job = Parse("");
  ASSERT_TRUE(job.ok()) << job.status();
  const SamplesConfig defaults;
  EXPECT_EQ(job->samples.frames, defaults.frames);
  EXPECT_TRUE(job->samples.negative_prompt.empty());
  EXPECT_TRUE(job->samples.image.empty());
}

TEST(JobSamplesTest, FramesMustBeFourKPlusOne) {
  for (const char* bad : {", frames: 8", ", frames: 0", ", frames: -3", ", frames: 2001", ", frames: x"}) {
    auto job = Parse(bad);
    ASSERT_FALSE(job.ok()) << bad;
    EXPECT_NE(std::string(job.status().message()).find("frames"), std::string::npos) << job.status();
  }
  EXPECT_TRUE(Parse(", frames: 1").ok());
  EXPECT_TRUE(Parse(", frames: 81").ok());
}

TEST(JobSamplesTest, UnknownSamplesKeyIsRefused) {
  auto job = Parse(", frame: 9");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(std::string(job.status().message()).find("frame"), std::string::npos);
}

}  // namespace
}  // namespace baton
