#include "core/sample/sample_renderer.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
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
  if (!job.samples.references.empty() && family.name() != "flux2") {
    return absl::InvalidArgumentError(
        "samples.references: reference images are FLUX.2's (editing); a Wan image-to-video model takes samples.image");
  }
  for (const std::string& file : job.samples.references) {
    if (!PathExists(file)) return absl::NotFoundError(absl::StrCat("samples.references: no file ", file));
  }
  return PipelineFolderOf(job.model).status();
}

std::string SampleStepDir(const std::string& output_dir, int64_t step) {
  return JoinPath(JoinPath(output_dir, "samples"), absl::StrCat("step-", step));
}

std::string SampleRenderer::StepDir(int64_t step) const { return SampleStepDir(output_dir_, step); }

bool SampleRenderer::Rendered(int64_t step) const { return PathExists(JoinPath(StepDir(step), "contact_sheet.png")); }

absl::StatusOr<SampleRecord> SampleRenderer::Render(int64_t step, const std::string& dir_suffix,
                                                    const Denoiser& denoiser, bool quiet) {
  const auto t0 = std::chrono::steady_clock::now();
  SampleRecord rec;
  rec.step = step;
  rec.dir = StepDir(step) + dir_suffix;
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
