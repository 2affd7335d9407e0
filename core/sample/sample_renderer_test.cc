// What SampleRenderer refuses before a run starts: samples of a model family it cannot render, and models outside a
// pipeline folder (no VAE to decode with).
#include "core/sample/sample_renderer.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

JobConfig JobWithSamples(const std::string& model) {
  auto job = ParseJobYaml(absl::StrCat("model: ", model, "\ndataset: d\nsamples: {every: 1, prompts: [a dog]}\n"));
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : JobConfig();
}

TEST(SampleRendererTest, WanSamplesNeedAPipelineFolder) {
  auto wan = OpenModelConfig(JoinPath(test_util::SourceDir(), "configs/models/wan-tiny.json"));
  ASSERT_TRUE(wan.ok()) << wan.status();
  absl::Status s = CheckSamplesPossible(JobWithSamples("m"), **wan);  // Wan renders videos, from a pipeline's vae/
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("vae/"), std::string::npos) << s;
  JobConfig no_samples = JobWithSamples("m");
  no_samples.samples.every = 0;
  EXPECT_TRUE(CheckSamplesPossible(no_samples, **wan).ok());  // validation alone is fine for every family
}

TEST(SampleRendererTest, PipelineFolderIsTheModelOrItsParent) {
  const std::string dir = test_util::MakeTempDir("pipeline_folder");
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "pipe/vae")).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "pipe/transformer")).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "bare/transformer")).ok());
  EXPECT_EQ(*PipelineFolderOf(JoinPath(dir, "pipe")), JoinPath(dir, "pipe"));
  EXPECT_EQ(*PipelineFolderOf(JoinPath(dir, "pipe/transformer")), JoinPath(dir, "pipe"));
  auto bare = PipelineFolderOf(JoinPath(dir, "bare/transformer"));
  EXPECT_EQ(bare.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bare.status().message().find("vae/"), std::string::npos) << bare.status();
}

}  // namespace
}  // namespace baton
