#include "job_service/job_submission.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

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

// The service's --data_root: every path a job names is judged inside it before anything is read, with the same
// answer whether or not the file exists (no probing the host), symlinks resolved.
TEST(JobSubmissionTest, PathsOutsideTheDataRootAreRefusedByName) {
  const std::string root = test_util::MakeTempDir("data_root");
  const std::string outside = test_util::MakeTempDir("outside");
  ASSERT_TRUE(MakeDirs(JoinPath(root, "model")).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(root, "cache")).ok());
  ASSERT_EQ(::symlink(outside.c_str(), JoinPath(root, "escape").c_str()), 0);
  auto refusal = [&](const std::string& yaml, const std::string& working_dir = "") {
    SubmittedJob s{yaml, "jobs/a.yaml", working_dir, "", 0};
    auto job = ParseSubmittedJob(s);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? ValidateSubmittedJob(s, *job, 2, root) : job.status();
  };
  const std::string cache = absl::StrCat("\ndataset: ", JoinPath(root, "cache"), "\n");
  for (const char* secret : {"/etc/shadow", "/etc/no-such-file"}) {
    absl::Status status = refusal(absl::StrCat("model: ", JoinPath(root, "model"), cache, "model_config: ", secret));
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_EQ(status.message(), absl::StrCat("jobs/a.yaml:3: model_config: ", secret,
                                             " is outside the job service's --data_root ", root));
  }
  absl::Status escape = refusal(absl::StrCat("model: ", JoinPath(root, "escape/m"), cache));
  EXPECT_EQ(escape.code(), absl::StatusCode::kPermissionDenied) << escape;
  EXPECT_NE(escape.message().find("jobs/a.yaml:1: model: "), std::string::npos) << escape;
  absl::Status up = refusal(absl::StrCat("model: ../../", outside.substr(outside.rfind('/') + 1), "/m", cache),
                            JoinPath(root, "model"));
  EXPECT_EQ(up.code(), absl::StatusCode::kPermissionDenied) << up;
  absl::Status validation = refusal(absl::StrCat("model: ", JoinPath(root, "model"), cache,
                                                 "validation: {every: 2, samples: 0, dataset: ", outside, "}\n"));
  EXPECT_EQ(validation.code(), absl::StatusCode::kPermissionDenied) << validation;
  EXPECT_NE(validation.message().find("jobs/a.yaml:3: validation.dataset: " + outside), std::string::npos)
      << validation;
  absl::Status dataset = refusal(absl::StrCat("model: ", JoinPath(root, "model"), "\ndataset: /tmp/elsewhere\n"));
  EXPECT_EQ(dataset.code(), absl::StatusCode::kPermissionDenied) << dataset;
  // Inside the root (relative to the submitter's folder too), the checks go on: here the missing model config.
  absl::Status inside = refusal(absl::StrCat("model: model", cache, "model_config: model/none.json"), root);
  EXPECT_EQ(inside.code(), absl::StatusCode::kInvalidArgument) << inside;
  EXPECT_NE(inside.message().find("does not exist"), std::string::npos) << inside;
}

// Issue 35: the images folder a job has its encoder worker read is fenced like every other path (the worker then reads
// no file that resolves outside that folder: encoder_worker/dataset_fence.h).
TEST(JobSubmissionTest, AnImagesFolderOutsideTheDataRootIsRefusedByName) {
  const std::string root = test_util::MakeTempDir("data_root_images");
  ASSERT_TRUE(MakeDirs(JoinPath(root, "model")).ok());
  ASSERT_EQ(::symlink("/etc", JoinPath(root, "etc").c_str()), 0);
  auto validate = [&](const std::string& images) {
    SubmittedJob s{absl::StrCat("model: ", JoinPath(root, "model"), "\ndataset: ", JoinPath(root, "cache"),
                                "\nencode:\n  encoder_worker: 127.0.0.1:1\n  images: ", images, "\n"),
                   "jobs/a.yaml", "", "", 0};
    auto job = ParseSubmittedJob(s);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? ValidateSubmittedJob(s, *job, 2, root) : job.status();
  };
  for (const std::string& images : {std::string("/etc"), JoinPath(root, "etc")}) {
    absl::Status status = validate(images);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_EQ(status.message(), absl::StrCat("jobs/a.yaml:4: encode.images: ", images,  // the encode: block
                                             " is outside the job service's --data_root ", root));
  }
  absl::Status inside = validate(JoinPath(root, "images"));  // need not exist on the coordinator's host
  EXPECT_NE(inside.code(), absl::StatusCode::kPermissionDenied) << inside;
  EXPECT_EQ(inside.message().find("encode.images"), absl::string_view::npos) << inside;
}

TEST(JobSubmissionTest, StepsOverrideHasTheStepLimit) {
  SubmittedJob s{"model: m\ndataset: d\n", "jobs/a.yaml", "", "", kMaxJobSteps + 1};
  auto job = ParseSubmittedJob(s);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("jobs/a.yaml: --steps 1000001 is over the limit of 1000000"), std::string::npos)
      << job.status();
  s.steps = -1;  // was taken as "the job's"
  auto negative = ParseSubmittedJob(s);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("--steps -1 is not a step count"), std::string::npos) << negative.status();
}

TEST(JobSubmissionTest, NamesAreFitForFolders) {
  EXPECT_EQ(DefaultJobName("jobs/lora-style.yaml"), "lora-style");
  EXPECT_EQ(DefaultJobName("job"), "job");
  EXPECT_EQ(SafeJobName("../etc/passwd"), "job.._etc_passwd");
  EXPECT_EQ(SafeJobName("my style v2"), "my_style_v2");
}

}  // namespace
}  // namespace baton
