#include "coordinator/job_submission.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(JobSubmissionTest, RelativePathsResolveAgainstTheClientsDirectoryAbsoluteOnesStay) {
  SubmittedJob s{"model: models/tiny\ndataset: /data/cache\ninit_lora: start.safetensors\nsteps: 4\n", "job.yaml",
                 "/home/me/work", "", 9};
  auto job = ParseSubmittedJob(s);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model, "/home/me/work/models/tiny");
  EXPECT_EQ(job->dataset, "/data/cache");
  EXPECT_EQ(job->init_lora, "/home/me/work/start.safetensors");
  EXPECT_EQ(job->model_config, "");
  EXPECT_EQ(job->steps, 9);  // the submit's override

  s.working_dir = "";
  s.steps = 0;
  job = ParseSubmittedJob(s);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model, "models/tiny");  // as coordinator --job reads it
  EXPECT_EQ(job->steps, 4);
}

TEST(JobSubmissionTest, AMissingModelIsRefusedWithFileAndLine) {
  SubmittedJob s{"steps: 2\n\nmodel: /no/such/model\ndataset: /no/such/cache\n", "jobs/a.yaml", "", "", 0};
  auto job = ParseSubmittedJob(s);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = ValidateSubmittedJob(s, *job, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "jobs/a.yaml:3: model: /no/such/model does not exist on the coordinator's host");
}

TEST(JobSubmissionTest, NamesAreFitForFolders) {
  EXPECT_EQ(DefaultJobName("jobs/lora-style.yaml"), "lora-style");
  EXPECT_EQ(DefaultJobName("job"), "job");
  EXPECT_EQ(SafeJobName("../etc/passwd"), "job.._etc_passwd");
  EXPECT_EQ(SafeJobName("my style v2"), "my_style_v2");
}

}  // namespace
}  // namespace baton
