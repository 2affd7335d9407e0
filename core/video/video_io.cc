#include "core/video/video_io.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/image/exif.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/video/av_error.h"

namespace baton {
namespace {

struct FormatCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecFreer {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFreer {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFreer {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsFreer {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using FramePtr = std::unique_ptr<AVFrame, FrameFreer>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFreer>;

// An opened decoder for the best video stream of a file.
struct Decoder {
  std::unique_ptr<AVFormatContext, FormatCloser> format;
  std::unique_ptr<AVCodecContext, CodecFreer> codec;
  std::unique_ptr<SwsContext, SwsFreer> sws;
  int stream = -1;
  double fps = 0.0;
  int width = 0, height = 0;  // frame 0's, as stored
  int64_t delivered = 0;      // frames handed to the sink
  int orientation = 1;        // the display matrix's turn, as an EXIF orientation (1 none, 6, 3, 8: 90, 180, 270 cw)
};

// The EXIF orientation that turns frames as `stream`'s display matrix says: ffmpeg's autorotate (theta = −the
// matrix's counterclockwise rotation, rounded to a multiple of 90); 1 without one.
int DisplayOrientation(const AVStream* stream) {
  size_t size = 0;
  const uint8_t* data = av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (data == nullptr || size < 9 * sizeof(int32_t)) return 1;
  int32_t matrix[9];
  std::memcpy(matrix, data, sizeof(matrix));
  const double theta = -av_display_rotation_get(matrix);
  if (!std::isfinite(theta)) return 1;
  const int quarter = ((static_cast<int>(std::lround(theta / 90.0)) % 4) + 4) % 4;
  return quarter == 1 ? 6 : quarter == 2 ? 3 : quarter == 3 ? 8 : 1;
}

absl::StatusOr<Decoder> OpenDecoder(const std::string& path) {
  if (!PathExists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such video file"));
  av_log_set_level(AV_LOG_QUIET);  // errors come back as Statuses instead
  Decoder d;
  AVFormatContext* fmt = nullptr;
  int rc = avformat_open_input(&fmt, path.c_str(), nullptr, nullptr);
  if (rc < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable video (", AvError(rc), ")"));
  d.format.reset(fmt);
  rc = avformat_find_stream_info(fmt, nullptr);
  if (rc < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read stream info (", AvError(rc), ")"));
  const AVCodec* codec = nullptr;
  d.stream = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (d.stream < 0 || codec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no decodable video stream (", AvError(d.stream), ")"));
  }
  AVStream* st = fmt->streams[d.stream];
  d.codec.reset(avcodec_alloc_context3(codec));
  if (!d.codec) return absl::ResourceExhaustedError("avcodec_alloc_context3 failed");
  rc = avcodec_parameters_to_context(d.codec.get(), st->codecpar);
  if (rc >= 0) rc = avcodec_open2(d.codec.get(), codec, nullptr);
  if (rc < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open the ", codec->name, " decoder (", AvError(rc), ")"));
  }
  if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) d.fps = av_q2d(st->avg_frame_rate);
  d.orientation = DisplayOrientation(st);
  return d;
}

// One decoded frame → RGB8, to the sink (the converter is made on the first frame; every frame must keep that size).
absl::Status DeliverRgb(Decoder& d, const AVFrame* f, const std::string& path, const FrameSink& sink) {
  if (f->width <= 0 || f->height <= 0 || f->width > kMaxImageSide || f->height > kMaxImageSide) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": frame size ", f->width, "x", f->height, " out of range"));
  }
  if (d.delivered == 0) {
    d.width = f->width;
    d.height = f->height;
  } else if (f->width != d.width || f->height != d.height) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": frame ", d.delivered, " is ", f->width, "x", f->height,
                                                   ", frame 0 was ", d.width, "x", d.height));
  }
  if (!d.sws) {
    d.sws.reset(sws_getContext(f->width, f->height, static_cast<AVPixelFormat>(f->format), f->width, f->height,
                               AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr));
    if (!d.sws) return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported pixel format ", f->format));
  }
  Image img(f->width, f->height);
  uint8_t* dst[4] = {img.pixels.data(), nullptr, nullptr, nullptr};
  int dst_stride[4] = {3 * f->width, 0, 0, 0};
  sws_scale(d.sws.get(), f->data, f->linesize, 0, f->height, dst, dst_stride);
  if (d.orientation != 1) img = ApplyExifOrientation(img, d.orientation);
  return sink(std::move(img), d.delivered++);
}

// Receives every frame the decoder has ready. Sets *done once max_frames frames are in.
absl::Status Drain(Decoder& d, AVFrame* frame, const std::string& path, int64_t max_frames, const FrameSink& sink,
                   bool* done) {
  while (true) {
    int rc = avcodec_receive_frame(d.codec.get(), frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return absl::OkStatus();
    if (rc < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": decoding failed (", AvError(rc), ")"));
    absl::Status s = DeliverRgb(d, frame, path, sink);
    av_frame_unref(frame);
    RETURN_IF_ERROR(s);
    if (max_frames >= 0 && d.delivered >= max_frames) {
      *done = true;
      return absl::OkStatus();
    }
  }
}

bool IsFrameImageName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".png") || absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg");
}

// Every frame of a video file to `sink` (StreamClip's); the stream's frame rate into *fps.
absl::StatusOr<int64_t> StreamVideoFile(const std::string& path, int64_t max_frames, const FrameSink& sink,
                                        double* fps) {
  ASSIGN_OR_RETURN(Decoder d, OpenDecoder(path));
  if (fps != nullptr) *fps = d.fps;
  FramePtr frame(av_frame_alloc());
  PacketPtr packet(av_packet_alloc());
  if (!frame || !packet) return absl::ResourceExhaustedError("av_frame_alloc / av_packet_alloc failed");
  bool done = max_frames == 0;
  while (!done) {
    int rc = av_read_frame(d.format.get(), packet.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) {
      if (d.delivered > 0) break;  // a damaged tail: keep the frames decoded so far
      return absl::InvalidArgumentError(absl::StrCat(path, ": reading failed (", AvError(rc), ")"));
    }
    if (packet->stream_index == d.stream) rc = avcodec_send_packet(d.codec.get(), packet.get());
    av_packet_unref(packet.get());
    if (rc < 0 && rc != AVERROR(EAGAIN)) {
      if (d.delivered > 0) break;
      return absl::InvalidArgumentError(absl::StrCat(path, ": corrupt video packet (", AvError(rc), ")"));
    }
    RETURN_IF_ERROR(Drain(d, frame.get(), path, max_frames, sink, &done));
  }
  if (!done) {  // flush the decoder's delayed frames
    avcodec_send_packet(d.codec.get(), nullptr);
    RETURN_IF_ERROR(Drain(d, frame.get(), path, max_frames, sink, &done));
  }
  if (d.delivered == 0 && max_frames != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no video frames could be decoded"));
  }
  return d.delivered;
}

// Collects a stream's frames.
FrameSink Collect(Clip* clip) {
  return [clip](Image frame, int64_t) {
    clip->frames.push_back(std::move(frame));
    return absl::OkStatus();
  };
}

}  // namespace

int VideoDisplayRotation(const std::string& path) {
  av_log_set_level(AV_LOG_QUIET);
  AVFormatContext* fmt = nullptr;
  if (avformat_open_input(&fmt, path.c_str(), nullptr, nullptr) < 0) return 0;
  std::unique_ptr<AVFormatContext, FormatCloser> format(fmt);
  const int stream = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream < 0) return 0;
  switch (DisplayOrientation(fmt->streams[stream])) {
    case 6:
      return 90;
    case 3:
      return 180;
    case 8:
      return 270;
    default:
      return 0;
  }
}

absl::StatusOr<Clip> ReadVideoFile(const std::string& path, int64_t max_frames) {
  Clip clip;
  RETURN_IF_ERROR(StreamVideoFile(path, max_frames, Collect(&clip), &clip.fps).status());
  return clip;
}

bool FrameNameLess(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (!digit(a[i]) || !digit(b[j])) {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i, ++j;
      continue;
    }
    size_t ie = i, je = j;  // the digit runs [i, ie) and [j, je), compared by value: length without leading zeros
    while (ie < a.size() && digit(a[ie])) ++ie;
    while (je < b.size() && digit(b[je])) ++je;
    size_t ia = i, jb = j;
    while (ia + 1 < ie && a[ia] == '0') ++ia;
    while (jb + 1 < je && b[jb] == '0') ++jb;
    if (ie - ia != je - jb) return ie - ia < je - jb;
    if (int c = a.compare(ia, ie - ia, b, jb, je - jb); c != 0) return c < 0;
    i = ie, j = je;
  }
  if (i < a.size() || j < b.size()) return j < b.size();  // a prefix of the other comes first
  return a < b;                                           // equal but for zero padding
}

absl::StatusOr<std::vector<std::string>> ListFrameFiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;  // a dangling link is kept, and named by the read
    if (name[0] != '.' && IsFrameImageName(name) && !it->is_directory(type_ec)) names.push_back(name);
  }
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot list the frame folder: ", ec.message()));
  std::sort(names.begin(), names.end(), FrameNameLess);
  return names;
}

namespace {

// Every frame of a frame folder to `sink` (StreamClip's).
absl::StatusOr<int64_t> StreamFrameFolder(const std::string& path, int64_t max_frames, const FrameSink& sink) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListFrameFiles(path));
  if (names.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no .png/.jpg/.jpeg frames"));
  if (max_frames >= 0 && static_cast<int64_t>(names.size()) > max_frames) names.resize(max_frames);
  int width = 0, height = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    ASSIGN_OR_RETURN(Image img, ReadImageFile(JoinPath(path, names[i])));
    if (i == 0) {
      width = img.width;
      height = img.height;
    } else if (img.width != width || img.height != height) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": frame ", names[i], " is ", img.width, "x", img.height,
                                                     ", ", names[0], " is ", width, "x", height,
                                                     " (all frames must have one size)"));
    }
    RETURN_IF_ERROR(sink(std::move(img), static_cast<int64_t>(i)));
  }
  return static_cast<int64_t>(names.size());
}

}  // namespace

absl::StatusOr<Clip> ReadFrameFolder(const std::string& dir, int64_t max_frames) {
  Clip clip;
  RETURN_IF_ERROR(StreamFrameFolder(dir, max_frames, Collect(&clip)).status());
  return clip;
}

absl::StatusOr<int64_t> StreamClip(const std::string& path, int64_t max_frames, const FrameSink& sink) {
  if (IsDirectory(path)) return StreamFrameFolder(path, max_frames, sink);
  return StreamVideoFile(path, max_frames, sink, nullptr);
}

absl::StatusOr<Clip> ReadClip(const std::string& path, int64_t max_frames) {
  if (IsDirectory(path)) {
    return ReadFrameFolder(path, max_frames);
  }
  return ReadVideoFile(path, max_frames);
}

}  // namespace baton
