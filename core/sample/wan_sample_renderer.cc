#include "core/sample/wan_sample_renderer.h"

#include <absl/strings/str_cat.h>

#include "core/encode/wan_encoder.h"
#include "core/model/wan_family.h"
#include "core/model/wan_i2v.h"
#include "core/sample/sample_videos.h"
#include "core/sample/wan_sample_inputs.h"
#include "core/sample/wan_sampler.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/wan_vae_decoder.h"

namespace baton {
namespace {

class WanSampleRenderer : public SampleRenderer {
 public:
  explicit WanSampleRenderer(std::string output_dir) : SampleRenderer(std::move(output_dir)) {}

  std::vector<std::string> prompts;
  std::vector<WanSampleInput> inputs;  // one per prompt: embeddings, noise, condition
  WanSampleSettings settings;
  std::unique_ptr<WanVaeDecoder> decoder;

 protected:
  absl::StatusOr<int64_t> RenderInto(const std::string& dir, const Denoiser& denoiser,
                                     const std::function<void(int64_t, int64_t)>& progress) override {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> latents, SampleWan(denoiser, inputs, settings, progress));
    std::vector<std::vector<Image>> videos;
    std::string listing;
    for (size_t k = 0; k < latents.size(); ++k) {
      ASSIGN_OR_RETURN(at::Tensor pixels, decoder->Decode(latents[k].to(at::kCPU)));
      videos.push_back(VideoFrames(pixels[0]));
      RETURN_IF_ERROR(WriteSampleVideo(JoinPath(dir, absl::StrCat(k, ".mp4")), videos.back()));
      absl::StrAppend(&listing, k, ".mp4\t", prompts[k], "\n");
    }
    RETURN_IF_ERROR(WritePng(JoinPath(dir, "contact_sheet.png"), VideoContactSheet(videos)));
    RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "prompts.txt"), listing));
    return static_cast<int64_t>(videos.size());
  }
  const char* noun() const override { return "videos"; }
};

// samples.image's condition ([cc, F' or 1, h, w]) and, for Wan 2.1 I2V, its CLIP embeddings; both undefined for a
// text-to-video model.
absl::StatusOr<ClipConditioning> Condition(const std::string& pipeline, const SamplesConfig& s, std::string& kind) {
  ASSIGN_OR_RETURN(std::string option, WanSampleConditioning(pipeline, !s.image.empty()));
  if (option == "none") return ClipConditioning{};
  WanEncoderOptions eo;
  eo.conditioning = option;
  ASSIGN_OR_RETURN(auto encoder, WanSampleEncoder::Open(pipeline, eo));
  kind = encoder->conditioning();
  if (kind == kWanFirstLastFrame) return absl::UnimplementedError("samples: first-last-frame models: not built yet");
  ASSIGN_OR_RETURN(at::Tensor pixels, WanFirstFramePixels(s.image, s.width, s.height, s.frames));
  return encoder->EncodeConditioning(pixels);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SampleRenderer>> CreateWanSampleRenderer(const JobConfig& job, const ModelFamily& family,
                                                                        int64_t text_len, const std::string& output_dir,
                                                                        const PromptEncoder& encode,
                                                                        int micro_batch_size) {
  const SamplesConfig& s = job.samples;
  const auto* wan = dynamic_cast<const WanFamily*>(&family);
  if (wan == nullptr) return absl::InternalError("samples: a Wan renderer for a model that is not Wan");
  ASSIGN_OR_RETURN(std::string pipeline, PipelineFolderOf(job.model));
  auto r = std::make_unique<WanSampleRenderer>(output_dir);
  r->prompts = s.prompts;
  r->settings.steps = s.steps;
  r->settings.guidance = s.guidance;
  r->settings.micro_batch_size = micro_batch_size;
  ASSIGN_OR_RETURN(r->settings.scheduler, LoadFlowSchedulerConfig(pipeline));
  ASSIGN_OR_RETURN(r->decoder, WanVaeDecoder::Load(pipeline, at::kFloat, at::kCPU));
  const WanVaeConfig& vae = r->decoder->config();
  ASSIGN_OR_RETURN(WanLatentGrid grid, WanSampleGrid(s.frames, s.width, s.height, vae.temporal_factor(),
                                                     vae.spatial_factor(), wan->config().patch_size[1]));
  const int64_t length = s.max_sequence_length > 0 ? s.max_sequence_length : text_len;
  ASSIGN_OR_RETURN(std::vector<at::Tensor> embeds, encode(s.prompts, length));
  std::vector<at::Tensor> negative;
  if (s.guidance > 1.0) {
    ASSIGN_OR_RETURN(negative, encode({s.negative_prompt}, length));
  }
  if (embeds.size() != s.prompts.size() || (s.guidance > 1.0 && negative.size() != 1)) {
    return absl::InternalError(
        absl::StrCat("samples: ", embeds.size(), " embeddings for ", s.prompts.size(), " prompts"));
  }
  std::string kind;
  ASSIGN_OR_RETURN(ClipConditioning condition, Condition(pipeline, s, kind));
  for (size_t k = 0; k < s.prompts.size(); ++k) {
    WanSampleInput in;
    in.prompt_embeds = embeds[k];
    if (!negative.empty()) in.negative_embeds = negative[0];
    in.noise = WanInitialNoise(vae.z_dim, grid, s.seed + k);
    in.conditioning = kind;
    in.condition = condition.condition;
    in.image_embeds = condition.image_embeds;
    r->inputs.push_back(std::move(in));
  }
  return std::unique_ptr<SampleRenderer>(std::move(r));
}

}  // namespace baton
