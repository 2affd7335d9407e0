// The coordinator's call to an encoder worker: build (or refresh) the training cache before training.
#pragma once

#include <absl/status/status.h>
#include <absl/time/time.h>

#include "core/train/job.h"

namespace baton {

// Asks job.encode.encoder_worker to encode job.encode.images into job.dataset, printing progress unless
// `quiet`. Fails when the worker is unreachable or reports per-file errors for every sample.
absl::Status EncodeOnWorker(const JobConfig& job, absl::Duration timeout, bool quiet);

}  // namespace baton
