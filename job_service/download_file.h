// The file a JobService Download sends: a job's LoRA (the latest, or a checkpoint's), as the job wrote it or rewritten
// in original/ComfyUI naming, or one file of a sample rendering. Nothing outside the job's output folder is read.
#pragma once

#include <absl/status/statusor.h>

#include <string>

#include "baton/v1/job_service.pb.h"
#include "core/lora/lora.h"

namespace baton {

struct DownloadFile {
  std::string name;   // e.g. "lora.safetensors", "lora_original.safetensors", "contact_sheet.png"
  std::string bytes;  // the whole file: a LoRA is tens of MB, and the job may replace it (atomically) meanwhile
};

// Reads what `req` asks for from `output_dir` (the job's). NOT_FOUND (with a hint) when the file is not there yet;
// INVALID_ARGUMENT for a sample file name other than contact_sheet.png, K.png, K.mp4 or prompts.txt, or a naming
// other than "", "diffusers" or "original" (LoRA files only). "original" rewrites the LoRA here, where libtorch is,
// so that neither `baton download` nor the browser view needs it. A checkpoint's LoRA (the raw adapters the run
// resumes from) is written out as the job writes its lora.safetensors, with `lora` (the job's spec): diffusers/PEFT
// names with alpha/r folded (LyCORIS for LoHa and LoKr), so it loads as the final one does.
absl::StatusOr<DownloadFile> ReadDownloadFile(const v1::DownloadRequest& req, const std::string& output_dir,
                                              const LoraSpec& lora);

}  // namespace baton
