#include "core/sample/sample_renderers.h"

#include "core/sample/flux2_sample_renderer.h"
#include "core/sample/wan_sample_renderer.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<SampleRenderer>> CreateSampleRenderer(const JobConfig& job, const ModelFamily& family,
                                                                     int64_t latent_channels, int64_t text_len,
                                                                     const std::string& output_dir,
                                                                     const PromptEncoder& encode,
                                                                     int micro_batch_size) {
  RETURN_IF_ERROR(CheckSamplesPossible(job, family));
  if (family.name() == "wan") {
    return CreateWanSampleRenderer(job, family, text_len, output_dir, encode, micro_batch_size);
  }
  return CreateFlux2SampleRenderer(job, latent_channels, text_len, output_dir, encode, micro_batch_size);
}

}  // namespace baton
