// Training dataset folder in the kohya / ai-toolkit layout: images (.png, .jpg, .jpeg; any case)
// with same-named UTF-8 .txt captions beside them ("cat_01.jpg" + "cat_01.txt") and optional loss masks
// ("cat_01.mask.png"), scanned into samples (ScanDataset) with captions cleaned and the trigger word applied.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/image/image.h"
#include "encoder_worker/dataset_fence.h"

namespace baton {

struct DatasetSample {
  std::string name;          // image file name, e.g. "cat_01.jpg" (unique within the folder)
  std::string image_path;    // dir/name
  std::string caption_path;  // dir/stem.txt
  std::string caption;       // trimmed, trigger applied: what the text encoder sees
  // Masked loss: dir/stem.mask.png (or .jpg, .jpeg), a gray-scale image of the image's size whose white trains fully,
  // black not at all and gray in proportion; "" when the sample has none (every pixel trains).
  std::string mask_path;
  // FLUX.2 reference images (editing): control_dir/stem.png or control_dir/stem_0.png, stem_1.png, ...
  // (encoder_worker/references.h), in order; empty when it has none.
  std::vector<std::string> reference_paths;
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;  // original image size
  int height = 0;
  int64_t image_bytes = 0;
  std::string image_sha256;  // hex SHA-256 of the image file alone
  // SHA-256 (hex) over the framed image bytes, raw trimmed caption and trigger (see
  // SampleContentHash), and the mask's and references' bytes when there are: any change to what would be encoded
  // changes it.
  std::string content_hash;
};

struct FileError {
  std::string path;
  absl::Status status;  // message names the file
};

struct Dataset {
  std::string dir;
  std::vector<DatasetSample> samples;  // sorted by name
  std::vector<FileError> errors;       // sorted by path
};

// Captions longer than this are refused, per record, by name (as images over kMaxImageSide are), and a caption file is
// never read past it + 1 byte. The text encoders keep 512 tokens, 2-4 KiB of text: 16 KiB is 4-8x that, so a longer
// .txt is not a caption the model could see but a misplaced file, and the encoder's cost grows with the whole text
// (its peak memory ~19x the caption, the BPE merges of one long word quadratically). Sample prompts share the bound.
constexpr uint64_t kMaxCaptionBytes = 16 << 10;

struct ScanOptions {
  std::string trigger;  // empty: no trigger word
  // Fully decode every image during the scan so truncated or corrupt bodies become per-file errors
  // here rather than at encode time (headers are always checked). Costs one decode per image.
  bool verify_decode = true;
  // When set, only the files whose name it accepts are looked at (read, checked, reported): one encoder worker's
  // share of the dataset (core/data/cache_shard.h). Unset: every file.
  std::function<bool(const std::string& name)> include;
  // Folders (besides the dataset folder) that the dataset's symlinks may lead into (encoder_worker
  // --follow_links_into; dataset_fence.h). Empty: a file that resolves outside the dataset folder is refused.
  std::vector<std::string> follow_links_into;
  // The control folder of FLUX.2 reference images (encoder_worker --control; references.h); "" = none. Its files are
  // read through a fence of their own (links may lead into it and the follow_links_into folders).
  std::string control_dir;
};

// A loss mask's file name ends in ".mask" + an image extension; such files are masks, never samples.
bool IsMaskFileName(const std::string& name);

// The scan is non-recursive, skips dotfiles, and is sorted by file name (bytewise) so sample order is the same
// everywhere. Problems with single files (missing caption, zero-byte, unreadable, truncated or non-image file,
// WebP, a caption over kMaxCaptionBytes, a mask that is not gray-scale, of another size or black everywhere, reference
// images that are ambiguous, too many or unreadable, an image
// or caption that is a dangling link or resolves outside the dataset folder...) are collected as per-file errors; the
// scan still returns the good files. Fails only if `dir` is missing, not a directory or cannot be listed, or a
// follow_links_into folder is missing.
absl::StatusOr<Dataset> ScanDataset(const std::string& dir, const ScanOptions& options = {});

// The caption file at `path`, read through `fence` (at most kMaxCaptionBytes) and cleaned (CleanCaption).
absl::StatusOr<std::string> ReadCaption(const DatasetFence& fence, const std::string& path);

// Caption file text → caption: drops a UTF-8 BOM and surrounding ASCII whitespace. INVALID_ARGUMENT
// (naming `path`) if the text is not valid UTF-8.
absl::StatusOr<std::string> CleanCaption(absl::string_view text, absl::string_view path);

// Trigger word convention (ai-toolkit style), on an already cleaned caption: every "[trigger]" in a caption is
// replaced by the trigger; then, if the caption does not contain the trigger, it is prepended as
// "<trigger>, <caption>" (just "<trigger>" for an empty caption), as kohya prepends class tokens. An empty
// trigger changes nothing.
std::string ApplyTrigger(const std::string& caption, const std::string& trigger);

// hex SHA-256 of "baton-sample-v1" then the framed (8-byte length + bytes) image bytes, raw
// trimmed caption and trigger.
std::string SampleContentHash(absl::string_view image_bytes, absl::string_view caption, absl::string_view trigger);

// Reads and decodes the sample's image (errors name the path). FAILED_PRECONDITION if the file's
// bytes no longer match image_sha256 (changed since the scan; rescan): so the bytes encoded are those the scan read
// through its fence, even if a link was swapped in since.
absl::StatusOr<Image> LoadSampleImage(const DatasetSample& sample);

}  // namespace baton
