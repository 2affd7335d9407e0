// A video training dataset folder (Wan): clips -- video files (.mp4, .avi, .mkv, .mov, .webm, .m4v; any case) or
// folders of frame images -- and still images, each with a same-named UTF-8 .txt caption ("walk.mp4" + "walk.txt",
// "walk/" + "walk.txt", "pose.png" + "pose.txt"). Hashed with caption, trigger and settings (video_dataset.cc), so a
// rerun re-encodes exactly what changed. Captions and links follow the image dataset's rules (dataset.h).
#pragma once

#include <absl/status/statusor.h>

#include <functional>
#include <string>
#include <vector>

#include "core/video/clip_windows.h"
#include "core/video/video_bucket.h"
#include "encoder_worker/dataset.h"

namespace baton {

struct VideoSample {
  std::string name;  // file or folder name, e.g. "walk.mp4" (the record id)
  // A still image (an image file that is no clip's first frame or mask): one one-frame record.
  bool still = false;
  std::string path;          // dir/name
  std::string caption_path;  // dir/stem.txt
  std::string caption;       // trimmed, trigger applied
  // Image-to-video: an image beside the clip with its stem ("walk.png", ".jpg" or ".jpeg") is the conditioning first
  // frame instead of the clip's own; "" = none.
  std::string image_path;
  // Masked loss: stem.mask.png (.jpg, .jpeg) beside the clip, gray-scale, scaled and cropped as the frames are and
  // applied to every frame (loss_mask.h); "" = none.
  std::string mask_path;
  // SHA-256 (hex) over "baton-clip-v1", the clip's bytes (a folder: each frame file's name and bytes, sorted),
  // the raw caption, the trigger and the bucket settings (frames, stride, area, step), then the image's bytes when
  // there is one, then the mask's (a clip without either keeps the hash it always had).
  std::string content_hash;
};

struct VideoDataset {
  std::string dir;
  std::vector<VideoSample> samples;  // sorted by name
  std::vector<FileError> errors;     // a clip without caption, an unreadable file
};

// True for the extensions above (lower-cased, with the dot).
bool IsVideoExtension(const std::string& extension_lower);

// Fails only if `dir` is missing or cannot be listed, or a follow_links_into folder is missing. Decoding is left to
// the encode step (a clip that does not decode is that clip's error then). Of `options`, the trigger, `include` (one
// encoder worker's share) and follow_links_into apply; verify_decode does not.
// `extraction` enters each clip's hash (another mode re-encodes it).
absl::StatusOr<VideoDataset> ScanVideoDataset(const std::string& dir, const VideoBucketSpec& spec,
                                              const ScanOptions& options = {}, const ClipExtraction& extraction = {});

// OK when the clip (a file, or a frame folder and each frame in it) and its conditioning image still resolve inside
// `fence`: what the encode step checks again right before it decodes them by path.
absl::Status CheckVideoSampleInside(const DatasetFence& fence, const VideoSample& sample);

}  // namespace baton
