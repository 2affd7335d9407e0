#include "encoder_worker/dataset.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <system_error>

#include "core/text/utf8.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/sha256.h"
#include "core/util/status.h"
#include "encoder_worker/dataset_fence.h"
#include "encoder_worker/loss_mask.h"
#include "encoder_worker/references.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

enum class FileKind { kIgnored, kImage, kUnsupportedImage };

FileKind Classify(const std::string& extension_lower) {
  if (extension_lower == ".png" || extension_lower == ".jpg" || extension_lower == ".jpeg") {
    return FileKind::kImage;
  }
  for (const char* ext : {".webp", ".gif", ".bmp", ".tif", ".tiff", ".avif", ".heic", ".heif"}) {
    if (extension_lower == ext) return FileKind::kUnsupportedImage;
  }
  return FileKind::kIgnored;
}

// The sample's mask (loss_mask.h), when it has one: read through the fence, decoded and checked against the image's
// size; its bytes join the content hash.
absl::Status LoadSampleMask(const DatasetFence& fence, const std::vector<std::string>& names, DatasetSample& s) {
  ASSIGN_OR_RETURN(std::string mask_name, FindMaskFile(s.name, names));
  if (mask_name.empty()) return absl::OkStatus();
  s.mask_path = JoinPath(fence.dir(), mask_name);
  ASSIGN_OR_RETURN(std::string bytes, fence.Read(s.mask_path));
  ASSIGN_OR_RETURN(Image mask, DecodeImage(bytes, s.mask_path));
  RETURN_IF_ERROR(CheckMaskImage(mask, s.width, s.height, s.mask_path));
  Sha256 h;
  h.Update("baton-sample-mask-v1");
  h.UpdateFramed(s.content_hash);
  h.UpdateFramed(bytes);
  s.content_hash = DigestToHex(h.Finish());
  return absl::OkStatus();
}

// The control folder of reference images: its fence and its file names (sorted).
struct ControlFolder {
  DatasetFence fence;
  std::vector<std::string> names;
};

// The sample's reference images (references.h), when it has any: read through the control folder's fence and
// decoded; their bytes join the content hash in order.
absl::Status LoadSampleReferences(const ControlFolder& control, DatasetSample& s) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, FindReferenceFiles(s.name, control.names));
  if (files.empty()) return absl::OkStatus();
  Sha256 h;
  h.Update("baton-sample-references-v1");
  h.UpdateFramed(s.content_hash);
  for (const std::string& file : files) {
    const std::string path = JoinPath(control.fence.dir(), file);
    ASSIGN_OR_RETURN(std::string bytes, control.fence.Read(path));
    RETURN_IF_ERROR(DecodeImage(bytes, path).status());
    h.UpdateFramed(bytes);
    s.reference_paths.push_back(path);
  }
  s.content_hash = DigestToHex(h.Finish());
  return absl::OkStatus();
}

// Everything about one image file; an error status becomes a FileError.
absl::StatusOr<DatasetSample> LoadSample(const DatasetFence& fence, const std::string& name,
                                         const std::vector<std::string>& names, const ControlFolder* control,
                                         const ScanOptions& options) {
  DatasetSample s;
  s.name = name;
  s.image_path = JoinPath(fence.dir(), name);
  s.caption_path = JoinPath(fence.dir(), fs::path(name).stem().string() + ".txt");
  if (!SomethingAt(s.caption_path)) {
    return absl::NotFoundError(absl::StrCat(s.image_path, ": missing caption file ", s.caption_path));
  }
  ASSIGN_OR_RETURN(std::string bytes, fence.Read(s.image_path));
  ASSIGN_OR_RETURN(ImageInfo info, ReadImageInfo(bytes, s.image_path));
  if (options.verify_decode) {
    RETURN_IF_ERROR(DecodeImage(bytes, s.image_path).status());
  }
  ASSIGN_OR_RETURN(std::string caption, ReadCaption(fence, s.caption_path));
  s.caption = ApplyTrigger(caption, options.trigger);
  s.format = info.format;
  s.width = info.width;
  s.height = info.height;
  s.image_bytes = static_cast<int64_t>(bytes.size());
  s.image_sha256 = Sha256Hex(bytes);
  s.content_hash = SampleContentHash(bytes, caption, options.trigger);
  RETURN_IF_ERROR(LoadSampleMask(fence, names, s));
  if (control != nullptr) RETURN_IF_ERROR(LoadSampleReferences(*control, s));
  return s;
}

// The folder's file names, sorted, without dotfiles and folders (a dangling link is listed: its read names it);
// `include`, when set, picks among them. `noun` says which folder it is in messages ("dataset", "control").
absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& dir, const char* noun,
                                                    const std::function<bool(const std::string&)>& include,
                                                    std::vector<std::string>* folders = nullptr) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(noun, " folder ", dir, " does not exist"));
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(noun, " path ", dir, " is not a directory"));
  }
  std::vector<std::string> names;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot list ", noun, " folder ", dir, ": ", ec.message()));
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      return absl::InternalError(absl::StrCat("error listing ", dir, ": ", ec.message()));
    }
    std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // dotfiles, incl. macOS "._x.jpg" forks
    if (include && !include(name)) continue;
    std::error_code type_ec;
    // A folder (even one named x.png) is not a sample; a link that is dangling or leads to something other than a
    // file is, to be named as such by the read.
    if (!it->is_regular_file(type_ec) && (!it->is_symlink(type_ec) || it->is_directory(type_ec))) {
      if (folders != nullptr && it->is_directory(type_ec)) folders->push_back(name);
      continue;
    }
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

absl::StatusOr<std::string> ReadCaption(const DatasetFence& fence, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, fence.Read(path, kMaxCaptionBytes, "caption"));
  return CleanCaption(text, path);
}

absl::StatusOr<std::string> CleanCaption(absl::string_view text, absl::string_view path) {
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": caption is not valid UTF-8"));
  }
  return std::string(absl::StripAsciiWhitespace(text));
}

std::string ApplyTrigger(const std::string& caption, const std::string& trigger) {
  if (trigger.empty()) return caption;
  std::string out = absl::StrReplaceAll(caption, {{"[trigger]", trigger}});
  if (out.find(trigger) != std::string::npos) return out;
  if (out.empty()) return trigger;
  return absl::StrCat(trigger, ", ", out);
}

bool IsMaskFileName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".mask.png") || absl::EndsWith(lower, ".mask.jpg") ||
         absl::EndsWith(lower, ".mask.jpeg");
}

std::string SampleContentHash(absl::string_view image_bytes, absl::string_view caption, absl::string_view trigger) {
  Sha256 h;
  h.Update("baton-sample-v1");
  h.UpdateFramed(image_bytes);
  h.UpdateFramed(caption);
  h.UpdateFramed(trigger);
  return DigestToHex(h.Finish());
}

absl::StatusOr<Dataset> ScanDataset(const std::string& dir, const ScanOptions& options) {
  // Another worker's share (a mask goes with its image, whoever encodes it).
  std::function<bool(const std::string&)> include;
  if (options.include) {
    include = [&options](const std::string& name) { return IsMaskFileName(name) || options.include(name); };
  }
  std::vector<std::string> folders;
  ASSIGN_OR_RETURN(const std::vector<std::string> names, ListFolder(dir, "dataset", include, &folders));
  if (!folders.empty()) {  // not read, but said: a user's nested folders are not silently left out
    std::sort(folders.begin(), folders.end());
    LogWarning("dataset ", dir, ": ", folders.size(), folders.size() == 1 ? " subfolder is" : " subfolders are",
               " not read (",
               absl::StrJoin(folders.begin(), folders.begin() + std::min<size_t>(folders.size(), 5), ", "),
               folders.size() > 5 ? ", ..." : "",
               "): an image dataset is one folder; encode each as its own cache and list them in `datasets:`");
  }
  ASSIGN_OR_RETURN(const DatasetFence fence, DatasetFence::Make(dir, options.follow_links_into));
  std::optional<ControlFolder> control;
  if (!options.control_dir.empty()) {
    ASSIGN_OR_RETURN(std::vector<std::string> control_names, ListFolder(options.control_dir, "control", nullptr));
    ASSIGN_OR_RETURN(DatasetFence control_fence, DatasetFence::Make(options.control_dir, options.follow_links_into));
    control = ControlFolder{std::move(control_fence), std::move(control_names)};
  }

  Dataset ds;
  ds.dir = dir;
  for (const std::string& name : names) {
    std::string ext = absl::AsciiStrToLower(fs::path(name).extension().string());
    FileKind kind = Classify(ext);
    if (kind == FileKind::kIgnored || IsMaskFileName(name)) continue;
    std::string path = JoinPath(dir, name);
    if (kind == FileKind::kUnsupportedImage) {
      ds.errors.push_back({path, absl::UnimplementedError(absl::StrCat(
                                     path, ": ", ext.substr(1), " not supported by this build (use PNG or JPEG)"))});
      continue;
    }
    auto sample = LoadSample(fence, name, names, control ? &*control : nullptr, options);
    if (sample.ok()) {
      ds.samples.push_back(*std::move(sample));
    } else {
      ds.errors.push_back({path, sample.status()});
    }
  }
  return ds;
}

absl::StatusOr<Image> LoadSampleImage(const DatasetSample& sample) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(sample.image_path));
  if (!sample.image_sha256.empty() && Sha256Hex(bytes) != sample.image_sha256) {
    return absl::FailedPreconditionError(absl::StrCat(sample.image_path, ": file changed since the dataset scan"));
  }
  return DecodeImage(bytes, sample.image_path);
}

}  // namespace baton
