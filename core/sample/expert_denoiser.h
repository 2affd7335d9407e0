// Wan 2.2 A14B's two experts at inference: each denoising call goes to the high-noise expert when its timestep is at
// or above the pipeline's boundary (boundary_ratio · 1000, as WanPipeline switches `transformer` / `transformer_2`),
// else to the low-noise one.
#pragma once

#include "core/sample/denoiser.h"

namespace baton {

// `high` and `low` must outlive the result. Micro-batches keep their order; those of one call may go to both.
Denoiser ExpertDenoiser(const Denoiser& high, const Denoiser& low, double boundary_ratio);

}  // namespace baton
