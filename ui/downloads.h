// Files of a job, from the job service's Download to the browser: its LoRA or a checkpoint's (diffusers/PEFT as the
// job wrote it, or rewritten here in BFL/ComfyUI naming), and sample images and videos (with byte ranges, which
// browsers ask of a video). Names are checked here before the job service checks them again.
#pragma once

#include <absl/status/status.h>

#include <string>

#include "ui/http_server.h"
#include "ui/job_client.h"

namespace baton {

// `checkpoint`: "" (the job's latest LoRA) or a step; `format`: "", "diffusers" or "original". An error before
// anything was sent is returned for the caller to answer.
absl::Status SendLora(const JobClient& jobs, const std::string& token, const std::string& job_id,
                      const std::string& checkpoint, const std::string& format, HttpResponder& out);

// `file`: K.png, K.mp4 or contact_sheet.png of the rendering after `step` steps; `range`: the Range header.
absl::Status SendSample(const JobClient& jobs, const std::string& token, const std::string& job_id,
                        const std::string& step, const std::string& file, const std::string& range, HttpResponder& out);

}  // namespace baton
