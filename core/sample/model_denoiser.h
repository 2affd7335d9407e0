// A Denoiser over a whole model held in this process: its frozen shell and one stage with every block, the
// embedders and the head (train-local's validation and samples; `baton sample` without stage workers).
#pragma once

#include <ATen/ATen.h>

#include "core/model/model_family.h"
#include "core/sample/denoiser.h"

namespace baton {

// `family`, `shell` and `stage` must outlive the Denoiser. The stage runs without a graph and with LoRA dropout off
// (eval mode, restored after each call); its adapters are used as they are. Floating inputs are uploaded to
// `device`; integer ones (position ids) stay on the host, where the shell reads them; outputs stay on `device`.
Denoiser ModelDenoiser(const ModelFamily& family, ShellModel& shell, StageModel& stage, at::ScalarType dtype,
                       at::Device device);

}  // namespace baton
