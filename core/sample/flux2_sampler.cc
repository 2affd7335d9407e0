#include "core/sample/flux2_sampler.h"

namespace baton {

// Placeholder until the sampler lands (issue 12).
std::vector<double> Flux2SampleSigmas(int64_t, int64_t) { return {}; }
at::Tensor Flux2InitialNoise(int64_t, int64_t, int64_t, uint64_t) { return {}; }
absl::StatusOr<std::vector<at::Tensor>> SampleFlux2(const Denoiser&, const std::vector<at::Tensor>&,
                                                    const std::vector<at::Tensor>&, const Flux2SampleSettings&,
                                                    const std::function<void(int64_t, int64_t)>&) {
  return absl::UnimplementedError("the FLUX.2 sampler is not implemented yet");
}

}  // namespace baton
