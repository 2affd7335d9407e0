#include "core/sample/flux2_sample_renderer.h"

#include <absl/strings/str_cat.h>

#include "core/image/image.h"
#include "core/sample/flux2_sampler.h"
#include "core/sample/sample_images.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/flux2_vae_decoder.h"

namespace baton {
namespace {

// FLUX.2 images: K.png per prompt (Flux2Pipeline's sampler and VAE), the contact sheet of all of them.
class Flux2SampleRenderer : public SampleRenderer {
 public:
  static absl::StatusOr<std::unique_ptr<SampleRenderer>> Create(const JobConfig& job, int64_t latent_channels,
                                                                int64_t text_len, const std::string& output_dir,
                                                                const PromptEncoder& encode, int micro_batch_size) {
    const SamplesConfig& s = job.samples;
    ASSIGN_OR_RETURN(std::string pipeline, PipelineFolderOf(job.model));
    std::unique_ptr<Flux2SampleRenderer> r(new Flux2SampleRenderer(output_dir));
    r->prompts_ = s.prompts;
    r->settings_.steps = s.steps;
    r->settings_.guidance = s.guidance;
    r->settings_.width = s.width;
    r->settings_.height = s.height;
    r->settings_.micro_batch_size = micro_batch_size;
    const int64_t length = s.max_sequence_length > 0 ? s.max_sequence_length : text_len;
    ASSIGN_OR_RETURN(r->prompt_embeds_, encode(s.prompts, length));
    if (r->prompt_embeds_.size() != s.prompts.size()) {
      return absl::InternalError(
          absl::StrCat("samples: ", r->prompt_embeds_.size(), " embeddings for ", s.prompts.size(), " prompts"));
    }
    for (size_t k = 0; k < s.prompts.size(); ++k) {
      r->noise_.push_back(Flux2InitialNoise(latent_channels, s.width, s.height, s.seed + k));
    }
    ASSIGN_OR_RETURN(const bool true_cfg, Flux2TrueCfg(pipeline, s.guidance));
    if (true_cfg) {  // a klein base model: Flux2KleinPipeline's guidance, the negative prompt encoded as the prompts
      ASSIGN_OR_RETURN(std::vector<at::Tensor> negative, encode({s.negative_prompt}, length));
      if (negative.size() != 1) return absl::InternalError("samples: no embedding of the negative prompt");
      r->settings_.negative_prompt_embeds = negative[0];
    }
    ASSIGN_OR_RETURN(r->decoder_, Flux2VaeDecoder::Load(pipeline, at::kFloat, at::kCPU));
    if (!s.references.empty()) {
      ASSIGN_OR_RETURN(auto vae, Flux2VaeEncoder::Load(pipeline, at::kFloat, at::kCPU));
      ASSIGN_OR_RETURN(r->settings_.references, EncodeFlux2References(*vae, s.references));
    }
    return std::unique_ptr<SampleRenderer>(std::move(r));
  }

 protected:
  absl::StatusOr<int64_t> RenderInto(const std::string& dir, const Denoiser& denoiser,
                                     const std::function<void(int64_t, int64_t)>& progress) override {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> latents,
                     SampleFlux2(denoiser, prompt_embeds_, noise_, settings_, progress));
    std::vector<Image> images;
    std::string listing;
    const int64_t gh = settings_.height / 16, gw = settings_.width / 16;
    for (size_t k = 0; k < latents.size(); ++k) {
      ASSIGN_OR_RETURN(at::Tensor pixels, decoder_->DecodeTokens(latents[k], gh, gw));
      images.push_back(PixelsToImage(pixels[0]));
      RETURN_IF_ERROR(WritePng(JoinPath(dir, absl::StrCat(k, ".png")), images.back()));
      absl::StrAppend(&listing, k, ".png\t", prompts_[k], "\n");
    }
    RETURN_IF_ERROR(WritePng(JoinPath(dir, "contact_sheet.png"), ContactSheet(images)));
    RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "prompts.txt"), listing));
    return static_cast<int64_t>(images.size());
  }
  const char* noun() const override { return "images"; }

 private:
  explicit Flux2SampleRenderer(std::string output_dir) : SampleRenderer(std::move(output_dir)) {}
  std::vector<std::string> prompts_;
  std::vector<at::Tensor> prompt_embeds_;  // [prompt] [L, text_dim]
  std::vector<at::Tensor> noise_;          // [prompt] [1, S, C]
  Flux2SampleSettings settings_;
  std::unique_ptr<Flux2VaeDecoder> decoder_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SampleRenderer>> CreateFlux2SampleRenderer(const JobConfig& job, int64_t latent_channels,
                                                                          int64_t text_len,
                                                                          const std::string& output_dir,
                                                                          const PromptEncoder& encode,
                                                                          int micro_batch_size) {
  return Flux2SampleRenderer::Create(job, latent_channels, text_len, output_dir, encode, micro_batch_size);
}

}  // namespace baton
