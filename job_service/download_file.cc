#include "job_service/download_file.h"

#include <absl/strings/str_cat.h>

#include <regex>

#include "coordinator/checkpoint.h"
#include "core/lora/lora_convert.h"
#include "core/sample/sample_renderer.h"
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

// The LoRA at `path` in original/ComfyUI naming, through a private temporary folder.
absl::StatusOr<std::string> ConvertedLora(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string dir, MakePrivateTempDir("baton-download-"));
  const std::string out = JoinPath(dir, "original.safetensors");
  const absl::Status converted = ConvertLoraFile(path, out, "original").status();
  absl::StatusOr<std::string> bytes = converted.ok() ? ReadFile(out) : absl::StatusOr<std::string>(converted);
  (void)RemoveAll(dir);
  return bytes;
}

}  // namespace

absl::StatusOr<DownloadFile> ReadDownloadFile(const v1::DownloadRequest& req, const std::string& output_dir) {
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
  file.name = path.substr(path.rfind('/') + 1);
  if (original) {
    file.name = "lora_original.safetensors";
    ASSIGN_OR_RETURN(file.bytes, ConvertedLora(path));
  } else {
    ASSIGN_OR_RETURN(file.bytes, ReadFile(path));
  }
  return file;
}

}  // namespace baton
