// Sample images during training: the job's prompts rendered with the current adapters through a Denoiser (this
// process or the stage workers), decoded by the pipeline's VAE and written to <output>/samples/step-N/K.png with a
// contact sheet (contact_sheet.png) and the prompts (prompts.txt). Everything that does not change during the run
// -- prompt embeddings, each prompt's initial noise, the VAE decoder -- is prepared once, so step N's pictures
// differ from step M's only by what the LoRA learned.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/model_family.h"
#include "core/sample/denoiser.h"
#include "core/sample/flux2_sampler.h"
#include "core/train/job.h"
#include "core/vae/flux2_vae_decoder.h"

namespace baton {

// Prompts → one [L, text_dim] fp32 embedding each, padded to max_sequence_length tokens.
using PromptEncoder = std::function<absl::StatusOr<std::vector<at::Tensor>>(const std::vector<std::string>& prompts,
                                                                            int64_t max_sequence_length)>;

// The pipeline folder a job's model belongs to: the folder holding vae/ -- `model` itself (a pipeline folder) or its
// parent (model: PIPE/transformer). NotFound, saying what is missing, for a bare transformer or a single file.
absl::StatusOr<std::string> PipelineFolderOf(const std::string& model);

// Whether the job's `samples:` can render with this model (FLUX.2, inside a pipeline folder), without loading
// anything: the job service checks it at submit. OK when the job has no samples.
absl::Status CheckSamplesPossible(const JobConfig& job, const ModelFamily& family);

struct SampleRecord {
  int64_t step = 0;
  std::string dir;            // <output>/samples/step-N
  std::string contact_sheet;  // <dir>/contact_sheet.png
  int64_t images = 0;
  double seconds = 0;             // the whole rendering: denoising, decoding, writing
  double seconds_per_sample = 0;  // seconds / images
};

// Where a run writes the sample rendering after `step` steps: <output_dir>/samples/step-N.
std::string SampleStepDir(const std::string& output_dir, int64_t step);

class SampleRenderer {
 public:
  // Fails, saying why, for a family other than FLUX.2, a model outside a pipeline folder, or prompts that do not
  // encode. `latent_channels` and `text_len` are the training cache's (the transformer's in_channels and, unless
  // samples.max_sequence_length says otherwise, the prompts' length).
  static absl::StatusOr<std::unique_ptr<SampleRenderer>> Create(const JobConfig& job, const ModelFamily& family,
                                                                int64_t latent_channels, int64_t text_len,
                                                                const std::string& output_dir,
                                                                const PromptEncoder& encode, int micro_batch_size);

  std::string StepDir(int64_t step) const;
  // Whether step's samples are on disk already (a resumed run does not render them again).
  bool Rendered(int64_t step) const;
  // Renders every prompt after `step` optimizer steps (0: before training). The folder appears complete or not at
  // all (written as step-N.partial, then renamed).
  absl::StatusOr<SampleRecord> Render(int64_t step, const Denoiser& denoiser, bool quiet);

 private:
  SampleRenderer() = default;
  std::string output_dir_;  // the run's; renderings go to SampleStepDir(output_dir_, step)
  std::vector<std::string> prompts_;
  std::vector<at::Tensor> prompt_embeds_;  // [prompt] [L, text_dim]
  std::vector<at::Tensor> noise_;          // [prompt] [1, S, C]
  Flux2SampleSettings settings_;
  std::unique_ptr<Flux2VaeDecoder> decoder_;
};

}  // namespace baton
