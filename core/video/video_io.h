// Video clips as RGB8 frames: decoding any file libavformat/libavcodec can read (Debian's FFmpeg libraries),
// reading a folder of frame images, and writing a short clip (MPEG-4 Part 2, or MJPEG for .avi when asked) so
// tests and scripts/make_wan_sample.py make their own videos. Every error is a Status naming the file.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/image/image.h"

namespace baton {

struct Clip {
  std::vector<Image> frames;  // all the same size
  double fps = 0.0;           // the stream's average frame rate; 0 when unknown (a folder of frames)
};

// Decodes the best video stream of `path`, converting each frame to RGB8 (libswscale, bicubic for any pixel
// format) and turning it as the stream's display matrix says (a phone's portrait clip, stored sideways: ffmpeg's
// autorotate, multiples of 90 degrees). Stops after `max_frames` frames (−1: all). INVALID_ARGUMENT for a file
// libavformat cannot open, no video stream, no decoder, a corrupt stream before any frame, or zero decoded frames;
// NOT_FOUND for a missing file. Sides above kMaxImageSide are rejected.
absl::StatusOr<Clip> ReadVideoFile(const std::string& path, int64_t max_frames = -1);

// The order of a folder's frames: runs of digits compare by their value ("frame_2.png" before "frame_10.png", as
// unpadded exports need), the rest byte by byte; names equal but for zero padding fall back to bytes.
bool FrameNameLess(const std::string& a, const std::string& b);

// A frame folder's frame files: names with a .png/.jpg/.jpeg extension, any case, that are not folders and do not
// start with "." (macOS's "._0001.png"), in FrameNameLess order. NOT_FOUND when the folder cannot be listed.
absl::StatusOr<std::vector<std::string>> ListFrameFiles(const std::string& dir);

// The first `max_frames` (−1: all) frames of ListFrameFiles, decoded with core/image. INVALID_ARGUMENT when there are
// none or their sizes differ (naming the first odd one).
absl::StatusOr<Clip> ReadFrameFolder(const std::string& dir, int64_t max_frames = -1);

// How ReadVideoFile turns `path`'s frames: 0, 90, 180 or 270 degrees clockwise (its display matrix); 0 for a file
// libavformat cannot open (its read names the error).
int VideoDisplayRotation(const std::string& path);

// A video file (ReadVideoFile) or a folder of frames (ReadFrameFolder), by what `path` is.
absl::StatusOr<Clip> ReadClip(const std::string& path, int64_t max_frames = -1);

// Each frame in order, with its index from 0, as it is decoded; a sink's error ends the read with it.
using FrameSink = std::function<absl::Status(Image frame, int64_t index)>;
// ReadClip frame by frame: one decoded frame at a time, so a long video costs what the sink keeps of it. Returns the
// frames delivered; the same errors as ReadClip.
absl::StatusOr<int64_t> StreamClip(const std::string& path, int64_t max_frames, const FrameSink& sink);

// Writes `frames` (non-empty, equal sizes, even width and height) at `fps` to `path`; the container comes from
// the extension (.avi, .mp4, .mkv, ...); an MP4's index goes first (faststart). codec "mpeg4" (default: small, lossy,
// near-lossless at quantiser 2), "h264" (x264 at CRF 12, what browsers play; Unimplemented without an H.264 encoder)
// or "mjpeg". YUV 4:2:0, so colours come back close, not exact.
// `display_rotation`: a display matrix turning the frames that many degrees clockwise when played (0: none), as phones
// store portrait clips (90: the "rotate=90" of a phone held upright).
absl::Status WriteVideoFile(const std::string& path, const std::vector<Image>& frames, int fps,
                            const std::string& codec = "mpeg4", int display_rotation = 0);

}  // namespace baton
