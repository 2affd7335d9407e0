#include "core/vae/flux2_vae_decoder.h"

namespace baton {

// Placeholder until the decoder lands (issue 12).
absl::StatusOr<std::unique_ptr<Flux2VaeDecoder>> Flux2VaeDecoder::Load(const std::string&, at::ScalarType,
                                                                       at::Device) {
  return absl::UnimplementedError("the FLUX.2 VAE decoder is not implemented yet");
}

}  // namespace baton
