// The coordinator's calls to an encoder worker: build (or refresh) the training cache before training, and encode
// the sample prompts.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <string>
#include <vector>

#include "core/sample/sample_renderer.h"
#include "core/train/job.h"

namespace baton {

// Asks job.encode.encoder_worker to encode job.encode.images into job.dataset, printing progress unless
// `quiet`. Fails when the worker is unreachable or reports per-file errors for every sample.
absl::Status EncodeOnWorker(const JobConfig& job, absl::Duration timeout, bool quiet);

// The prompt embeddings of `prompts` [max_sequence_length, text_dim] fp32 each, from the encoder worker at `address`
// (its text encoder; the worker must pad to max_sequence_length). Errors name the worker.
absl::StatusOr<std::vector<at::Tensor>> EncodePromptsOnWorker(const std::string& address,
                                                              const std::vector<std::string>& prompts,
                                                              int64_t max_sequence_length, absl::Duration timeout);

// The job's sample prompts through the encoder worker at `address` (a job with `encode: {encoder_worker: ...}`):
// the coordinator then needs no text encoder of its own.
PromptEncoder WorkerPromptEncoder(const std::string& address, absl::Duration timeout);

}  // namespace baton
