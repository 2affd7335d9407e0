// The sample renderer of a job's family: FLUX.2 images or Wan videos (one file each, beside the SampleRenderer they
// implement); the only place that knows both.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/model/model_family.h"
#include "core/sample/sample_renderer.h"
#include "core/train/job.h"

namespace baton {

// Fails, saying why, for a family without samples, a model outside a pipeline folder, or prompts that do not encode.
// `latent_channels` and `text_len` are the training cache's (the transformer's in_channels and, unless
// samples.max_sequence_length says otherwise, the prompts' length). Everything fixed for the run is prepared here.
absl::StatusOr<std::unique_ptr<SampleRenderer>> CreateSampleRenderer(const JobConfig& job, const ModelFamily& family,
                                                                     int64_t latent_channels, int64_t text_len,
                                                                     const std::string& output_dir,
                                                                     const PromptEncoder& encode, int micro_batch_size);

}  // namespace baton
