// The coordinator's call to an encoder worker: build (or refresh) the training cache before training.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <string>
#include <vector>

#include "core/train/job.h"

namespace baton {

// Asks job.encode.encoder_worker to encode job.encode.images into job.dataset, printing progress unless
// `quiet`. Fails when the worker is unreachable or reports per-file errors for every sample.
absl::Status EncodeOnWorker(const JobConfig& job, absl::Duration timeout, bool quiet);

// Asks job.encode.encoder_worker for the text embeddings of `prompts` ([L, text_dim] fp32 each, padded to
// max_sequence_length): the sample prompts of a job whose encoder runs on a worker.
absl::StatusOr<std::vector<at::Tensor>> EncodePromptsOnWorker(const JobConfig& job,
                                                              const std::vector<std::string>& prompts,
                                                              int64_t max_sequence_length, absl::Duration timeout);

}  // namespace baton
