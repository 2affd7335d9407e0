#include "encoder_worker/video_dataset.h"

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/util/files.h"
#include "core/util/sha256.h"
#include "core/util/status.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

bool IsFrameImage(const fs::path& p) {
  const std::string ext = absl::AsciiStrToLower(p.extension().string());
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// The clip's bytes into `h`: the file, or a frame folder's image files (name and bytes, in ReadFrameFolder's order).
absl::Status HashClipBytes(const std::string& path, bool is_folder, Sha256& h) {
  if (!is_folder) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
    h.UpdateFramed(bytes);
    return absl::OkStatus();
  }
  std::vector<std::string> frames;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && IsFrameImage(it->path())) frames.push_back(it->path().filename().string());
  }
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot list frame folder ", path, ": ", ec.message()));
  if (frames.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no .png/.jpg frames in the folder"));
  std::sort(frames.begin(), frames.end());
  for (const std::string& f : frames) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(JoinPath(path, f)));
    h.UpdateFramed(f);
    h.UpdateFramed(bytes);
  }
  return absl::OkStatus();
}

// The first of stem.png, stem.jpg, stem.jpeg in `dir`, or "".
std::string SidecarImage(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".png", ".jpg", ".jpeg"}) {
    const std::string path = JoinPath(dir, stem + ext);
    if (PathExists(path) && !IsDirectory(path)) return path;
  }
  return "";
}

absl::StatusOr<VideoSample> LoadVideoSample(const std::string& dir, const std::string& name, bool is_folder,
                                            const std::string& trigger, const VideoBucketSpec& spec) {
  VideoSample s;
  s.name = name;
  s.path = JoinPath(dir, name);
  s.caption_path = JoinPath(dir, (is_folder ? name : fs::path(name).stem().string()) + ".txt");
  if (!PathExists(s.caption_path)) {
    return absl::NotFoundError(absl::StrCat(s.path, ": missing caption file ", s.caption_path));
  }
  ASSIGN_OR_RETURN(std::string caption_text, ReadFile(s.caption_path));
  ASSIGN_OR_RETURN(std::string caption, CleanCaption(caption_text, s.caption_path));
  s.caption = ApplyTrigger(caption, trigger);
  Sha256 h;
  h.Update("baton-clip-v1");
  RETURN_IF_ERROR(HashClipBytes(s.path, is_folder, h));
  h.UpdateFramed(caption);
  h.UpdateFramed(trigger);
  h.UpdateFramed(
      absl::StrCat(spec.max_frames, "/", spec.min_frames, "/", spec.stride, "/", spec.target_area, "/", spec.step));
  s.image_path = SidecarImage(dir, is_folder ? name : fs::path(name).stem().string());
  if (!s.image_path.empty()) {
    ASSIGN_OR_RETURN(std::string image, ReadFile(s.image_path));
    h.UpdateFramed(image);
  }
  s.content_hash = DigestToHex(h.Finish());
  return s;
}

}  // namespace

bool IsVideoExtension(const std::string& extension_lower) {
  for (const char* ext : {".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v"}) {
    if (extension_lower == ext) return true;
  }
  return false;
}

absl::StatusOr<VideoDataset> ScanVideoDataset(const std::string& dir, const std::string& trigger,
                                              const VideoBucketSpec& spec,
                                              const std::function<bool(const std::string& name)>& include) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("dataset folder ", dir, " does not exist or is not a directory"));
  }
  std::vector<std::pair<std::string, bool>> clips;  // name, is a frame folder
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot list dataset folder ", dir, ": ", ec.message()));
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return absl::InternalError(absl::StrCat("error listing ", dir, ": ", ec.message()));
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (include && !include(name)) continue;  // another worker's share
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      clips.push_back({name, true});
    } else if (it->is_regular_file(type_ec) &&
               IsVideoExtension(absl::AsciiStrToLower(it->path().extension().string()))) {
      clips.push_back({name, false});
    }
  }
  std::sort(clips.begin(), clips.end());
  VideoDataset ds;
  ds.dir = dir;
  for (const auto& [name, is_folder] : clips) {
    auto sample = LoadVideoSample(dir, name, is_folder, trigger, spec);
    if (sample.ok()) {
      ds.samples.push_back(*std::move(sample));
    } else {
      ds.errors.push_back({JoinPath(dir, name), sample.status()});
    }
  }
  return ds;
}

}  // namespace baton
