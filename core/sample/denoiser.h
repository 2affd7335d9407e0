// Forward-only model evaluation, wherever the model runs: in this process (sample/model_denoiser.h) or through the
// pipeline's stage workers (stage_driver/stage_denoiser.h). Validation and sampling are written against it.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <functional>
#include <vector>

#include "core/model/model_family.h"

namespace baton {

// The model's "output" (for flow matching: the predicted velocity ε − x0, the shape of batches[i].noisy) for each
// micro-batch, with the current adapters, without gradients, dropout or any change to trainable state. fp32, on the
// CPU (the pipeline's) or on the device the model ran on (ModelDenoiser): callers move what they compare.
using Denoiser = std::function<absl::StatusOr<std::vector<at::Tensor>>(const std::vector<NoisyBatch>& batches)>;

}  // namespace baton
