// Fuzz target: the job parser (core/train/job.h ParseJobYaml). The input is a job YAML. Any text gives a job or
// an error, never a crash; an error names the source; an accepted job hashes and names itself, and parses the
// same twice (the parser keeps no state).
#include "core/train/job.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"

namespace baton::fuzz {

bool RunJob(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<JobConfig> job = ParseJobYaml(text, "fuzz.yaml");
  if (!job.ok()) {
    Require(std::string(job.status().message()).find("fuzz.yaml") != std::string::npos, "errors name the file");
    return false;
  }
  Require(job->micro_batches >= 1 && job->batch_size >= job->micro_batches, "batch layout validated");
  Require(job->batch_size % job->micro_batches == 0, "micro-batches divide the batch");
  Require(job->lora.rank >= 1, "rank validated");
  Require(!JobName(*job).empty(), "a job has a name");
  absl::StatusOr<JobConfig> again = ParseJobYaml(text, "fuzz.yaml");
  Require(again.ok() && JobHash(*again) == JobHash(*job), "parsing is deterministic");
  return true;
}

}  // namespace baton::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  baton::fuzz::RunJob(data, size);
  return 0;
}
