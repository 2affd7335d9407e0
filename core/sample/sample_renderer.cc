#include "core/sample/sample_renderer.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/image/image.h"
#include "core/sample/flux2_sampler.h"
#include "core/sample/sample_images.h"
#include "core/sample/wan_sample_renderer.h"
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
    ASSIGN_OR_RETURN(r->decoder_, Flux2VaeDecoder::Load(pipeline, at::kFloat, at::kCPU));
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

absl::StatusOr<std::string> PipelineFolderOf(const std::string& model) {
  for (const std::string& dir : {model, std::filesystem::path(model).parent_path().string()}) {
    if (!dir.empty() && IsDirectory(JoinPath(dir, "vae"))) return dir;
  }
  return absl::NotFoundError(
      absl::StrCat("sample images need the pipeline's vae/ (and text_encoder/, tokenizer/): "
                   "model ",
                   model, " is neither a pipeline folder nor the transformer/ inside one"));
}

absl::Status CheckSamplesPossible(const JobConfig& job, const ModelFamily& family) {
  if (!job.samples.enabled()) return absl::OkStatus();
  if (family.name() != "flux2" && family.name() != "wan") {
    return absl::UnimplementedError(absl::StrCat("samples: samples are rendered for FLUX.2 and Wan; this model is ",
                                                 family.name(), " (its validation loss works: `validation:`)"));
  }
  return PipelineFolderOf(job.model).status();
}

absl::StatusOr<std::unique_ptr<SampleRenderer>> SampleRenderer::Create(const JobConfig& job, const ModelFamily& family,
                                                                       int64_t latent_channels, int64_t text_len,
                                                                       const std::string& output_dir,
                                                                       const PromptEncoder& encode,
                                                                       int micro_batch_size) {
  RETURN_IF_ERROR(CheckSamplesPossible(job, family));
  if (family.name() == "wan")
    return CreateWanSampleRenderer(job, family, text_len, output_dir, encode, micro_batch_size);
  return Flux2SampleRenderer::Create(job, latent_channels, text_len, output_dir, encode, micro_batch_size);
}

std::string SampleStepDir(const std::string& output_dir, int64_t step) {
  return JoinPath(JoinPath(output_dir, "samples"), absl::StrCat("step-", step));
}

std::string SampleRenderer::StepDir(int64_t step) const { return SampleStepDir(output_dir_, step); }

bool SampleRenderer::Rendered(int64_t step) const { return PathExists(JoinPath(StepDir(step), "contact_sheet.png")); }

absl::StatusOr<SampleRecord> SampleRenderer::Render(int64_t step, const Denoiser& denoiser, bool quiet) {
  const auto t0 = std::chrono::steady_clock::now();
  SampleRecord rec;
  rec.step = step;
  rec.dir = StepDir(step);
  rec.contact_sheet = JoinPath(rec.dir, "contact_sheet.png");
  const std::string partial = absl::StrCat(rec.dir, ".partial");
  RETURN_IF_ERROR(RemoveAll(partial));
  RETURN_IF_ERROR(MakeDirs(partial));
  const bool tty = ::isatty(STDOUT_FILENO);
  auto progress = [&](int64_t done, int64_t total) {
    if (quiet || !tty) return;
    std::printf("\rsamples after step %lld: denoising step %lld/%lld", static_cast<long long>(step),
                static_cast<long long>(done), static_cast<long long>(total));
    std::fflush(stdout);
  };
  ASSIGN_OR_RETURN(rec.images, RenderInto(partial, denoiser, progress));
  if (!quiet && tty) std::printf("\n");
  RETURN_IF_ERROR(RemoveAll(rec.dir));
  std::error_code ec;
  std::filesystem::rename(partial, rec.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("samples: renaming ", partial, " to ", rec.dir, ": ", ec.message()));
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rec.seconds_per_sample = rec.seconds / static_cast<double>(std::max<int64_t>(rec.images, 1));
  if (!quiet) {
    std::printf("samples after step %lld: %s (%lld %s, %.2f s per sample)\n", static_cast<long long>(step),
                rec.contact_sheet.c_str(), static_cast<long long>(rec.images), noun(), rec.seconds_per_sample);
  }
  return rec;
}

}  // namespace baton
