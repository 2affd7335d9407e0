#include "encoder_worker/video_dataset.h"

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "core/util/files.h"
#include "core/util/sha256.h"
#include "core/util/status.h"
#include "core/video/video_io.h"
#include "encoder_worker/sidecar.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

bool IsFrameImage(const fs::path& p) {
  const std::string ext = absl::AsciiStrToLower(p.extension().string());
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// The clip's bytes into `h`: the file, or a frame folder's image files (name and bytes, in ReadFrameFolder's order),
// each read through `fence`.
absl::Status HashClipBytes(const DatasetFence& fence, const std::string& path, bool is_folder, Sha256& h) {
  if (!is_folder) return fence.HashFramed(path, h);  // a MiB at a time: a video's size costs no memory
  RETURN_IF_ERROR(fence.Check(path));
  ASSIGN_OR_RETURN(std::vector<std::string> frames, ListFrameFiles(path));
  if (frames.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no .png/.jpg frames in the folder"));
  for (const std::string& f : frames) {
    ASSIGN_OR_RETURN(std::string bytes, fence.Read(JoinPath(path, f)));
    h.UpdateFramed(f);
    h.UpdateFramed(bytes);
  }
  return absl::OkStatus();
}

// The folder's stem + `kind` + .png, .jpg or .jpeg, `kind` and the extension in any case (a dangling link counts: it is
// named, not passed over), as a path; "" when none; an error when two are. `names`: the folder's files, sorted.
absl::StatusOr<std::string> SidecarImage(const std::string& dir, const std::vector<std::string>& names,
                                         const std::string& stem, const std::string& kind, const std::string& owner,
                                         const std::string& what) {
  ASSIGN_OR_RETURN(std::string name,
                   FindSidecar(names, stem, {kind + ".png", kind + ".jpg", kind + ".jpeg"}, owner, what));
  return name.empty() ? name : JoinPath(dir, name);
}

// The settings a clip's record depends on besides its bytes and caption; the later ones only when not the default, so
// a clip encoded before they existed keeps its hash.
std::string ClipSettings(const VideoBucketSpec& spec, const ClipExtraction& e) {
  std::string out =
      absl::StrCat(spec.max_frames, "/", spec.min_frames, "/", spec.stride, "/", spec.target_area, "/", spec.step);
  if (!spec.frame_buckets.empty()) absl::StrAppend(&out, "/frames=", absl::StrJoin(spec.frame_buckets, ","));
  if (e.mode != "head") absl::StrAppend(&out, "/", e.mode, "=", e.clips_per_video, ",", e.slide_stride);
  return out;
}

// The mask beside a clip or still (stem.mask.png, .jpg, .jpeg): checked, and its bytes into `h`.
absl::Status LoadVideoMask(const DatasetFence& fence, const std::vector<std::string>& names, const std::string& stem,
                           const Image* still, VideoSample& s, Sha256& h) {
  ASSIGN_OR_RETURN(s.mask_path, SidecarImage(fence.dir(), names, stem, ".mask", s.path, "masks"));
  if (s.mask_path.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string bytes, fence.Read(s.mask_path));
  ASSIGN_OR_RETURN(Image mask, DecodeImage(bytes, s.mask_path));
  // Gray, white somewhere, and a still's size; a clip's frames' size is checked when the clip is decoded.
  RETURN_IF_ERROR(
      CheckMaskImage(mask, still ? still->width : mask.width, still ? still->height : mask.height, s.mask_path));
  h.Update("mask");
  h.UpdateFramed(bytes);
  return absl::OkStatus();
}

// A still image of the folder: its caption, and a hash of its bytes, caption, trigger, area and mask.
absl::StatusOr<VideoSample> LoadStillSample(const DatasetFence& fence, const std::vector<std::string>& names,
                                            const std::string& name, const std::string& trigger,
                                            const VideoBucketSpec& spec) {
  VideoSample s;
  s.name = name;
  s.still = true;
  s.path = JoinPath(fence.dir(), name);
  const std::string stem = fs::path(name).stem().string();
  s.caption_path = JoinPath(fence.dir(), stem + ".txt");
  if (!SomethingAt(s.caption_path)) {
    return absl::NotFoundError(absl::StrCat(s.path, ": missing caption file ", s.caption_path));
  }
  ASSIGN_OR_RETURN(std::string caption, ReadCaption(fence, s.caption_path));
  s.caption = ApplyTrigger(caption, trigger);
  ASSIGN_OR_RETURN(std::string bytes, fence.Read(s.path));
  ASSIGN_OR_RETURN(Image image, DecodeImage(bytes, s.path));
  Sha256 h;
  h.Update("baton-still-v1");
  h.UpdateFramed(bytes);
  h.UpdateFramed(caption);
  h.UpdateFramed(trigger);
  h.UpdateFramed(absl::StrCat(spec.target_area, "/", spec.step));
  RETURN_IF_ERROR(LoadVideoMask(fence, names, stem, &image, s, h));
  s.content_hash = DigestToHex(h.Finish());
  return s;
}

absl::StatusOr<VideoSample> LoadVideoSample(const DatasetFence& fence, const std::vector<std::string>& names,
                                            const std::string& name, bool is_folder, const std::string& trigger,
                                            const VideoBucketSpec& spec, const ClipExtraction& extraction) {
  const std::string& dir = fence.dir();
  VideoSample s;
  s.name = name;
  s.path = JoinPath(dir, name);
  s.caption_path = JoinPath(dir, (is_folder ? name : fs::path(name).stem().string()) + ".txt");
  if (!SomethingAt(s.caption_path)) {
    return absl::NotFoundError(absl::StrCat(s.path, ": missing caption file ", s.caption_path));
  }
  ASSIGN_OR_RETURN(std::string caption, ReadCaption(fence, s.caption_path));
  s.caption = ApplyTrigger(caption, trigger);
  Sha256 h;
  h.Update("baton-clip-v1");
  RETURN_IF_ERROR(HashClipBytes(fence, s.path, is_folder, h));
  h.UpdateFramed(caption);
  h.UpdateFramed(trigger);
  h.UpdateFramed(ClipSettings(spec, extraction));
  // A clip the decoder turns (a phone's portrait clip) hashes its turn: caches made before clips were turned encode it
  // again; every other clip keeps its hash.
  if (!is_folder) {
    if (const int turn = VideoDisplayRotation(s.path); turn != 0) h.UpdateFramed(absl::StrCat("turned ", turn));
  }
  const std::string stem = is_folder ? name : fs::path(name).stem().string();
  ASSIGN_OR_RETURN(s.image_path, SidecarImage(dir, names, stem, "", s.path, "first-frame images"));
  if (!s.image_path.empty()) {
    ASSIGN_OR_RETURN(std::string image, fence.Read(s.image_path));
    h.UpdateFramed(image);
  }
  RETURN_IF_ERROR(LoadVideoMask(fence, names, stem, nullptr, s, h));
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

absl::StatusOr<VideoDataset> ScanVideoDataset(const std::string& dir, const VideoBucketSpec& spec,
                                              const ScanOptions& options, const ClipExtraction& extraction) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("dataset folder ", dir, " does not exist or is not a directory"));
  }
  std::vector<std::pair<std::string, bool>> clips;  // name, is a frame folder
  std::vector<std::string> images;                  // image files: first frames, masks or stills
  std::vector<std::string> names;                   // every file and folder, for the sidecars
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot list dataset folder ", dir, ": ", ec.message()));
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return absl::InternalError(absl::StrCat("error listing ", dir, ": ", ec.message()));
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    names.push_back(name);
    std::error_code type_ec;
    const bool video_name = IsVideoExtension(absl::AsciiStrToLower(it->path().extension().string()));
    if (it->is_directory(type_ec)) {
      clips.push_back({name, true});
    } else if (video_name && (it->is_regular_file(type_ec) || it->is_symlink(type_ec))) {
      clips.push_back({name, false});  // a dangling link, or one to a device, is named by the read
    } else if (IsFrameImage(it->path()) && !IsMaskFileName(name)) {
      images.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  // An image whose stem is a clip's is that clip's first frame (image-to-video); the others are stills. Paired over
  // the whole folder, then each worker keeps its share (`include`): a first frame follows its clip.
  std::set<std::string> clip_stems;
  for (const auto& [name, is_folder] : clips) clip_stems.insert(is_folder ? name : fs::path(name).stem().string());
  for (const std::string& name : images) {
    if (!clip_stems.count(fs::path(name).stem().string())) clips.push_back({name, false});
  }
  if (options.include) {
    std::erase_if(clips, [&](const auto& clip) { return !options.include(clip.first); });  // another worker's share
  }
  std::sort(clips.begin(), clips.end());
  ASSIGN_OR_RETURN(const DatasetFence fence, DatasetFence::Make(dir, options.follow_links_into));
  VideoDataset ds;
  ds.dir = dir;
  for (const auto& [name, is_folder] : clips) {
    auto sample = IsFrameImage(fs::path(name)) && !is_folder
                      ? LoadStillSample(fence, names, name, options.trigger, spec)
                      : LoadVideoSample(fence, names, name, is_folder, options.trigger, spec, extraction);
    if (sample.ok()) {
      ds.samples.push_back(*std::move(sample));
    } else {
      ds.errors.push_back({JoinPath(dir, name), sample.status()});
    }
  }
  return ds;
}

absl::Status CheckVideoSampleInside(const DatasetFence& fence, const VideoSample& sample) {
  RETURN_IF_ERROR(fence.Check(sample.path));
  if (IsDirectory(sample.path)) {
    ASSIGN_OR_RETURN(std::vector<std::string> frames, ListFrameFiles(sample.path));
    for (const std::string& f : frames) RETURN_IF_ERROR(fence.Check(JoinPath(sample.path, f)));
  }
  if (!sample.image_path.empty()) RETURN_IF_ERROR(fence.Check(sample.image_path));
  if (!sample.mask_path.empty()) RETURN_IF_ERROR(fence.Check(sample.mask_path));
  return absl::OkStatus();
}

}  // namespace baton
