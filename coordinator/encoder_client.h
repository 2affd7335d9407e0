// The coordinator's calls to an encoder worker: build (or refresh) a training cache or one share of it (encode_step.h
// runs the job's encode step), and encode the sample prompts.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <functional>
#include <string>
#include <vector>

#include "baton/v1/encoder.pb.h"
#include "core/sample/sample_renderer.h"
#include "core/train/job.h"

namespace baton {

// One EncodeDataset call to the encoder worker at `address`: `on_progress` sees each progress message as it streams
// (from one thread, the caller's); returns the last one (`finished`). Errors (unreachable, refused, died mid-dataset)
// name the worker.
absl::StatusOr<v1::EncodeProgress> CallEncodeDataset(const std::string& address, const v1::EncodeDatasetRequest& req,
                                                     absl::Duration timeout,
                                                     const std::function<void(const v1::EncodeProgress&)>& on_progress);

// The prompt embeddings of `prompts` [max_sequence_length, text_dim] fp32 each, from the encoder worker at `address`
// (its text encoder; the worker must pad to max_sequence_length). Errors name the worker.
absl::StatusOr<std::vector<at::Tensor>> EncodePromptsOnWorker(const std::string& address,
                                                              const std::vector<std::string>& prompts,
                                                              int64_t max_sequence_length, absl::Duration timeout);

// The job's sample prompts through the encoder worker at `address` (a job with `encode: {encoder_worker: ...}`):
// the coordinator then needs no text encoder of its own.
PromptEncoder WorkerPromptEncoder(const std::string& address, absl::Duration timeout);

}  // namespace baton
