// Samples during training: the job's prompts rendered with the current adapters through a Denoiser (this process or
// the stage workers), decoded by the pipeline's VAE and written to <output>/samples/step-N/ (K.png, or K.mp4 for Wan)
// with a contact sheet and the prompts (prompts.txt). Everything fixed for the run -- prompt embeddings, initial noise,
// conditioning, the VAE decoder -- is prepared once, so step N's samples differ from step M's only by the LoRA.
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
#include "core/train/job.h"

namespace baton {

// Prompts → one [L, text_dim] fp32 embedding each, padded to max_sequence_length tokens.
using PromptEncoder = std::function<absl::StatusOr<std::vector<at::Tensor>>(const std::vector<std::string>& prompts,
                                                                            int64_t max_sequence_length)>;

// The pipeline folder a job's model belongs to: the folder holding vae/ -- `model` itself (a pipeline folder) or its
// parent (model: PIPE/transformer). NotFound, saying what is missing, for a bare transformer or a single file.
absl::StatusOr<std::string> PipelineFolderOf(const std::string& model);

// Whether the job's `samples:` can render with this model (FLUX.2 or Wan, inside a pipeline folder), without loading
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

// Renders a job's samples after a step; one implementation per family (FLUX.2 images in flux2_sample_renderer.h, Wan
// videos in wan_sample_renderer.h), made by CreateSampleRenderer (sample_renderers.h).
class SampleRenderer {
 public:
  virtual ~SampleRenderer() = default;
  std::string StepDir(int64_t step) const;
  // Whether step's samples are on disk already (a resumed run does not render them again).
  bool Rendered(int64_t step) const;
  // Renders every prompt after `step` optimizer steps (0: before training) into StepDir(step) + `dir_suffix` ("-ema":
  // the adapters' EMA beside them). The folder appears complete or not at all (written as step-N.partial, then
  // renamed).
  absl::StatusOr<SampleRecord> Render(int64_t step, const std::string& dir_suffix, const Denoiser& denoiser,
                                      bool quiet);

 protected:
  explicit SampleRenderer(std::string output_dir) : output_dir_(std::move(output_dir)) {}
  // Writes one step's files into `dir`: a sample per prompt, contact_sheet.png and prompts.txt; returns how many
  // samples. `progress(step, steps)` after each denoising step.
  virtual absl::StatusOr<int64_t> RenderInto(const std::string& dir, const Denoiser& denoiser,
                                             const std::function<void(int64_t, int64_t)>& progress) = 0;
  virtual const char* noun() const = 0;  // what a sample is: "images", "videos"

 private:
  std::string output_dir_;  // the run's; renderings go to SampleStepDir(output_dir_, step)
};

}  // namespace baton
