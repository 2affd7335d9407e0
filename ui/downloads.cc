#include "ui/downloads.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

#include <regex>

#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr size_t kMaxSampleBytes = 256 << 20;  // a sample video of many frames; far above any we render

// The whole file, in memory (samples are small).
absl::StatusOr<std::string> Fetch(const JobClient& jobs, const std::string& token, const v1::DownloadRequest& req,
                                  size_t max_bytes) {
  std::string data;
  bool too_big = false;
  RETURN_IF_ERROR(jobs.Download(token, req, [&](const v1::FileChunk& c) {
    if (static_cast<size_t>(c.total_bytes()) > max_bytes) return !(too_big = true);
    data += c.data();
    return true;
  }));
  if (too_big) return absl::ResourceExhaustedError(absl::StrCat("the file is over ", max_bytes, " bytes"));
  return data;
}

// "bytes=A-B" or "bytes=A-" within `size`: [begin, end). False for anything else (the whole file is sent then).
bool ParseRange(const std::string& range, size_t size, size_t* begin, size_t* end) {
  static const std::regex kRange("bytes=([0-9]{1,15})-([0-9]{0,15})");
  std::smatch m;
  if (!std::regex_match(range, m, kRange)) return false;
  uint64_t a = 0, b = 0;
  if (!absl::SimpleAtoi(m[1].str(), &a) || a >= size) return false;
  if (m[2].str().empty() || !absl::SimpleAtoi(m[2].str(), &b) || b >= size) b = size - 1;
  if (b < a) return false;
  *begin = a;
  *end = b + 1;
  return true;
}

std::string ContentType(const std::string& file) {
  if (absl::EndsWith(file, ".png")) return "image/png";
  if (absl::EndsWith(file, ".mp4")) return "video/mp4";
  return "application/octet-stream";
}

// The job's LoRA as the job wrote it, or as the service rewrote it (req.naming), streamed chunk by chunk.
absl::Status StreamLora(const JobClient& jobs, const std::string& token, const v1::DownloadRequest& req,
                        const std::string& file_name, HttpResponder& out) {
  return jobs.Download(token, req, [&](const v1::FileChunk& c) {
    if (!out.started()) {
      out.Start(200, "application/octet-stream",
                {{"Content-Disposition", absl::StrCat("attachment; filename=\"", file_name, "\"")},
                 {"Content-Length", absl::StrCat(c.total_bytes())}});
    }
    return out.Write(c.data());
  });
}

}  // namespace

absl::Status SendLora(const JobClient& jobs, const std::string& token, const std::string& job_id,
                      const std::string& checkpoint, const std::string& format, HttpResponder& out) {
  int64_t step = 0;
  if (!checkpoint.empty() && (!absl::SimpleAtoi(checkpoint, &step) || step <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint must be a step, not '", checkpoint, "'"));
  }
  if (!format.empty() && format != "diffusers" && format != "original") {
    return absl::InvalidArgumentError(absl::StrCat("format must be diffusers or original, not '", format, "'"));
  }
  ASSIGN_OR_RETURN(v1::JobInfo job, jobs.Status(token, job_id));
  v1::DownloadRequest req;
  req.set_job_id(job_id);
  req.set_checkpoint_step(step);
  const bool original = format == "original";
  const std::string file_name = absl::StrCat(job.name(), "-", job.job_id(), step > 0 ? absl::StrCat("-step", step) : "",
                                             original ? "-comfyui" : "", ".safetensors");
  if (original) req.set_naming("original");
  return StreamLora(jobs, token, req, file_name, out);
}

absl::Status SendSample(const JobClient& jobs, const std::string& token, const std::string& job_id,
                        const std::string& step, const std::string& file, const std::string& range,
                        HttpResponder& out) {
  static const std::regex kFile("[0-9]{1,4}\\.(png|mp4)|contact_sheet\\.png");
  int64_t samples_step = 0;
  if (!absl::SimpleAtoi(step, &samples_step) || samples_step < 0 || !std::regex_match(file, kFile)) {
    return absl::NotFoundError(absl::StrCat("no sample '", step, "/", file, "'"));
  }
  v1::DownloadRequest req;
  req.set_job_id(job_id);
  req.set_samples_step(samples_step);
  req.set_sample_file(file);
  ASSIGN_OR_RETURN(std::string data, Fetch(jobs, token, req, kMaxSampleBytes));
  // A rendering never changes once written: the browser may keep it (privately) for a day.
  std::vector<std::pair<std::string, std::string>> headers = {{"Cache-Control", "private, max-age=86400"},
                                                              {"Accept-Ranges", "bytes"}};
  size_t begin = 0, end = 0;
  if (!range.empty() && ParseRange(range, data.size(), &begin, &end)) {
    headers.push_back({"Content-Range", absl::StrCat("bytes ", begin, "-", end - 1, "/", data.size())});
    out.Send({206, ContentType(file), headers, data.substr(begin, end - begin)});
    return absl::OkStatus();
  }
  out.Send({200, ContentType(file), headers, std::move(data)});
  return absl::OkStatus();
}

}  // namespace baton
