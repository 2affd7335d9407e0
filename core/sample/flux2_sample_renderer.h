// The renderer of a FLUX.2 job's `samples:`: K.png per prompt (Flux2Pipeline's sampler and the pipeline's VAE), and
// the contact sheet of all of them (CreateSampleRenderer picks it for the "flux2" family).
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/sample/sample_renderer.h"
#include "core/train/job.h"

namespace baton {

absl::StatusOr<std::unique_ptr<SampleRenderer>> CreateFlux2SampleRenderer(const JobConfig& job, int64_t latent_channels,
                                                                          int64_t text_len,
                                                                          const std::string& output_dir,
                                                                          const PromptEncoder& encode,
                                                                          int micro_batch_size);

}  // namespace baton
