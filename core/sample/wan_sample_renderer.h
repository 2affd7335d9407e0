// Wan sample videos during training: each prompt sampled as WanPipeline (or, for image-to-video models, as
// WanImageToVideoPipeline from samples.image, the first frame) with the pipeline's scheduler and CFG against
// samples.negative_prompt, decoded by its VAE into <step dir>/K.mp4 (16 fps), with a contact sheet of a few frames
// per prompt (one row each) and prompts.txt.
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <string>

#include "core/model/model_family.h"
#include "core/sample/sample_renderer.h"
#include "core/train/job.h"

namespace baton {

// The renderer of a Wan job's `samples:` (CreateSampleRenderer picks it for the "wan" family). Prompts and the
// negative prompt are encoded once (at samples.max_sequence_length, else `text_len`); each prompt K's noise comes
// from seed + K. InvalidArgument for a size or frame count the model cannot take, an image-to-video model without
// samples.image, or an image for a text-to-video model.
absl::StatusOr<std::unique_ptr<SampleRenderer>> CreateWanSampleRenderer(const JobConfig& job, const ModelFamily& family,
                                                                        int64_t text_len, const std::string& output_dir,
                                                                        const PromptEncoder& encode,
                                                                        int micro_batch_size);

}  // namespace baton
