#include "job_service/download_file.h"

#include <absl/strings/str_cat.h>

#include <regex>

#include "coordinator/checkpoint.h"
#include "core/lora/adapter_file.h"
#include "core/lora/lora_convert.h"
#include "core/sample/sample_renderer.h"
#include "core/tensor/safetensors.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// The file `req` names inside the job's output folder: its LoRA, a checkpoint's, or a sample rendering's contact
// sheet, K.png, K.mp4 or prompts.txt. Any other sample file name is refused (no path leaves the step's folder).
absl::StatusOr<std::string> DownloadPath(const v1::DownloadRequest& req, const std::string& output_dir) {
  if (!req.has_samples_step()) {
    const std::string dir = req.checkpoint_step() > 0 ? CheckpointDir(output_dir, req.checkpoint_step()) : output_dir;
    return JoinPath(dir, "lora.safetensors");
  }
  const std::string file = req.sample_file().empty() ? "contact_sheet.png" : req.sample_file();
  static const std::regex kSampleFile("contact_sheet\\.png|[0-9]{1,4}\\.(png|mp4)|prompts\\.txt");
  if (!std::regex_match(file, kSampleFile)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample_file must be contact_sheet.png, K.png or K.mp4 (prompt K) or prompts.txt, not '", file, "'"));
  }
  if (req.samples_step() < 0) return absl::InvalidArgumentError("samples_step must be >= 0");
  return JoinPath(SampleStepDir(output_dir, req.samples_step()), file);
}

// The LoRA at `path` as a download: a checkpoint's raw adapters (`step` > 0) first written as the job's
// lora.safetensors is (SaveLoraDiffusers / SaveLycoris with `lora`), then in original/ComfyUI naming when `original`;
// through a private temporary folder.
absl::StatusOr<std::string> LoraBytes(const std::string& path, int64_t step, const LoraSpec& lora, bool original) {
  if (step <= 0 && !original) return ReadFile(path);
  ASSIGN_OR_RETURN(const std::string dir, MakePrivateTempDir("baton-download-"));
  auto written = [&]() -> absl::StatusOr<std::string> {
    std::string file = path;
    if (step > 0) {
      ASSIGN_OR_RETURN(const TensorMap params, LoadAllSafetensors(path));
      file = JoinPath(dir, "lora.safetensors");
      const std::map<std::string, std::string> meta = {{"software", "baton"}, {"baton_step", std::to_string(step)}};
      const bool lycoris = lora.type == AdapterType::kLoha || lora.type == AdapterType::kLokr;
      RETURN_IF_ERROR(lycoris ? SaveLycoris(file, params, lora, meta) : SaveLoraDiffusers(file, params, lora, meta));
    }
    if (!original) return ReadFile(file);
    const std::string out = JoinPath(dir, "original.safetensors");
    RETURN_IF_ERROR(ConvertLoraFile(file, out, "original").status());
    return ReadFile(out);
  }();
  (void)RemoveAll(dir);
  return written;
}

}  // namespace

absl::StatusOr<DownloadFile> ReadDownloadFile(const v1::DownloadRequest& req, const std::string& output_dir,
                                              const LoraSpec& lora) {
  const bool original = req.naming() == "original";
  if (!original && !req.naming().empty() && req.naming() != "diffusers") {
    return absl::InvalidArgumentError(absl::StrCat("naming must be diffusers or original, not '", req.naming(), "'"));
  }
  if (original && req.has_samples_step()) {
    return absl::InvalidArgumentError("naming applies to LoRA files, not to a sample rendering's files");
  }
  ASSIGN_OR_RETURN(const std::string path, DownloadPath(req, output_dir));
  if (!PathExists(path)) {
    const char* hint = req.has_samples_step()      ? " (the job renders samples at the steps its samples: key names)"
                       : req.checkpoint_step() > 0 ? " (see baton checkpoints)"
                                                   : " yet (no checkpoint written)";
    return absl::NotFoundError(absl::StrCat("job ", req.job_id(), " has no ", path, hint));
  }
  DownloadFile file;
  file.name = original ? "lora_original.safetensors" : path.substr(path.rfind('/') + 1);
  if (req.has_samples_step()) {
    ASSIGN_OR_RETURN(file.bytes, ReadFile(path));
  } else {
    ASSIGN_OR_RETURN(file.bytes, LoraBytes(path, req.checkpoint_step(), lora, original));
  }
  return file;
}

}  // namespace baton
