// A job as the job service receives it: YAML text, the file name the client gave, and the client's working
// directory. It is read exactly as `coordinator --job FILE` run in that directory reads it (ParseJobYaml),
// then checked as far as can be without workers, so that a bad job is refused at submit with `file:line`.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string>

#include "core/train/job.h"

namespace baton {

struct SubmittedJob {
  std::string yaml;         // the job file's text
  std::string job_file;     // its path as the client named it (messages: job_file:line)
  std::string working_dir;  // the client's cwd; empty: the coordinator's
  std::string name;         // empty: job_file's base name without extension
  int64_t steps = 0;        // > 0: overrides the job's step count
  // One member of the file's `sweep:` (core/train/sweep.h): the service runs each member as a job of its own, all
  // of them side by side on the same stage workers. Empty: the file is the job.
  std::string sweep_member;
};

// Parses the YAML (at most kMaxJobFileBytes, lists within their limits: core/train/job.h) and makes the relative
// paths among model, model_config, dataset, init_lora and validation.dataset absolute against working_dir
// (`coordinator --job` resolves them against its cwd; a service has its own). The encoder worker's encode.images is
// passed on as written (it names a path on the encoder's host, which writes the cache only inside its --cache_root
// and reads no file that resolves outside that folder: encoder_worker/dataset_fence.h).
// With sweep_member: that member's job (NotFound when the file no longer has it).
absl::StatusOr<JobConfig> ParseSubmittedJob(const SubmittedJob& submitted);

// Those paths and encode.images lie inside `data_root` (symlinks resolved; a path that does not exist yet is judged by
// its deepest existing folder, so the answer never tells whether a file outside exists): else PERMISSION_DENIED naming
// `file:line`, the key and the path. Empty data_root: no restriction (in-process use; the job service passes its
// --data_root). Then they exist (InvalidArgument naming `file:line` of the key), and CheckJobPlan passes for `stages`.
// `frozen_key` (optional): CheckJobPlan's.
absl::Status ValidateSubmittedJob(const SubmittedJob& submitted, const JobConfig& job, int stages,
                                  const std::string& data_root = "", std::string* frozen_key = nullptr);

// "lora-style" from "jobs/lora-style.yaml" (then SafeJobName).
std::string DefaultJobName(const std::string& job_file);
// A name fit for a folder: letters, digits, '-', '_', '.' (others become '_'), at most 64, not starting with '.'.
std::string SafeJobName(const std::string& name);

}  // namespace baton
