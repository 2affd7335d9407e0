// WriteVideoFile (video_io.h): libavformat muxing + libavcodec encoding of RGB8 frames.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/util/status.h"
#include "core/video/av_error.h"
#include "core/video/video_io.h"

namespace baton {
namespace {

constexpr size_t kSwscaleReadPast = 64;  // bytes past the last pixel swscale may read (valgrind saw 4; 64 is safe)

struct Muxer {
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVStream* stream = nullptr;
  SwsContext* sws = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* packet = nullptr;
  ~Muxer() {
    sws_freeContext(sws);
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
    if (format != nullptr && format->pb != nullptr) avio_closep(&format->pb);
    avformat_free_context(format);
  }
};

absl::Status Open(Muxer& m, const std::string& path, int width, int height, int fps, const std::string& codec_name,
                  int display_rotation) {
  av_log_set_level(AV_LOG_QUIET);
  int rc = avformat_alloc_output_context2(&m.format, nullptr, nullptr, path.c_str());
  if (rc < 0 || m.format == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no container for this extension (", AvError(rc), ")"));
  }
  const bool mjpeg = codec_name == "mjpeg", h264 = codec_name == "h264";
  if (!mjpeg && !h264 && codec_name != "mpeg4") {
    return absl::InvalidArgumentError("video codec must be h264, mpeg4 or mjpeg");
  }
  const AVCodec* codec = avcodec_find_encoder(mjpeg ? AV_CODEC_ID_MJPEG : h264 ? AV_CODEC_ID_H264 : AV_CODEC_ID_MPEG4);
  if (codec == nullptr)
    return absl::UnimplementedError(absl::StrCat("this libavcodec has no ", codec_name, " encoder"));
  m.codec = avcodec_alloc_context3(codec);
  m.stream = avformat_new_stream(m.format, nullptr);
  m.frame = av_frame_alloc();
  m.packet = av_packet_alloc();
  if (!m.codec || !m.stream || !m.frame || !m.packet) return absl::ResourceExhaustedError("libav allocation failed");
  m.codec->width = width;
  m.codec->height = height;
  m.codec->time_base = AVRational{1, fps};
  m.codec->framerate = AVRational{fps, 1};
  m.codec->pix_fmt = mjpeg ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P;
  m.codec->gop_size = 8;
  if (h264) {
    // What browsers play (MPEG-4 part 2 they do not): x264 at a high constant quality, one thread, and without the
    // macroblock tree: x264's AVX-512 code for it reads memory it never wrote, so on such CPUs the same frames gave
    // different bytes from one encode to the next (VideoWriterTest.TheSameFramesGiveTheSameBytesOnADirtyHeap). For
    // a few seconds of samples at CRF 12 the tree's bit savings do not matter; the same bytes every run do.
    m.codec->thread_count = 1;
    av_opt_set(m.codec->priv_data, "crf", "12", 0);
    av_opt_set(m.codec->priv_data, "preset", "medium", 0);
    av_opt_set_int(m.codec->priv_data, "mbtree", 0, 0);
  } else {
    m.codec->flags |= AV_CODEC_FLAG_QSCALE;  // constant quantiser: near-lossless small clips
    m.codec->global_quality = FF_QP2LAMBDA * 2;
  }
  if (m.format->oformat->flags & AVFMT_GLOBALHEADER) m.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  rc = avcodec_open2(m.codec, codec, nullptr);
  if (rc >= 0) rc = avcodec_parameters_from_context(m.stream->codecpar, m.codec);
  if (rc < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open the encoder (", AvError(rc), ")"));
  m.stream->time_base = m.codec->time_base;
  if (display_rotation != 0) {  // how a player turns the frames, as a phone records a portrait clip
    auto* matrix =
        reinterpret_cast<int32_t*>(av_stream_new_side_data(m.stream, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t)));
    if (matrix == nullptr) return absl::ResourceExhaustedError("libav allocation failed");
    av_display_rotation_set(matrix, display_rotation);
  }
  m.frame->format = m.codec->pix_fmt;
  m.frame->width = width;
  m.frame->height = height;
  rc = av_frame_get_buffer(m.frame, 0);
  if (rc >= 0) rc = avio_open(&m.format->pb, path.c_str(), AVIO_FLAG_WRITE);
  AVDictionary* muxer_options = nullptr;  // MP4: the index first, so a browser can play while it downloads
  av_dict_set(&muxer_options, "movflags", "+faststart", 0);
  if (rc >= 0) rc = avformat_write_header(m.format, &muxer_options);
  av_dict_free(&muxer_options);
  if (rc < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot start writing (", AvError(rc), ")"));
  m.sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, m.codec->pix_fmt, SWS_BICUBIC, nullptr,
                         nullptr, nullptr);
  if (m.sws == nullptr) return absl::InternalError("sws_getContext failed");
  return absl::OkStatus();
}

// Sends `frame` (null: flush) and writes every packet the encoder returns.
absl::Status Encode(Muxer& m, AVFrame* frame, const std::string& path) {
  int rc = avcodec_send_frame(m.codec, frame);
  if (rc < 0) return absl::InternalError(absl::StrCat(path, ": encoding failed (", AvError(rc), ")"));
  while (true) {
    rc = avcodec_receive_packet(m.codec, m.packet);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return absl::OkStatus();
    if (rc < 0) return absl::InternalError(absl::StrCat(path, ": encoding failed (", AvError(rc), ")"));
    // One frame long: without a duration, MP4's edit list ends at the last frame's start and demuxers drop it.
    if (m.packet->duration <= 0) m.packet->duration = 1;
    av_packet_rescale_ts(m.packet, m.codec->time_base, m.stream->time_base);
    m.packet->stream_index = m.stream->index;
    rc = av_interleaved_write_frame(m.format, m.packet);
    if (rc < 0) return absl::InternalError(absl::StrCat(path, ": writing failed (", AvError(rc), ")"));
  }
}

}  // namespace

absl::Status WriteVideoFile(const std::string& path, const std::vector<Image>& frames, int fps,
                            const std::string& codec, int display_rotation) {
  if (frames.empty() || fps <= 0) return absl::InvalidArgumentError("WriteVideoFile: need frames and fps > 0");
  const int w = frames[0].width, h = frames[0].height;
  if (w <= 0 || h <= 0 || w % 2 != 0 || h % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("WriteVideoFile: ", w, "x", h, " (sides must be even, > 0)"));
  }
  Muxer m;
  RETURN_IF_ERROR(Open(m, path, w, h, fps, codec, display_rotation));
  std::vector<uint8_t> padded(static_cast<size_t>(3) * w * h + kSwscaleReadPast, 0);
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].width != w || frames[i].height != h) {
      return absl::InvalidArgumentError(absl::StrCat("WriteVideoFile: frame ", i, " differs in size from frame 0"));
    }
    if (frames[i].pixels.size() != padded.size() - kSwscaleReadPast) {
      return absl::InvalidArgumentError(absl::StrCat("WriteVideoFile: frame ", i, " is not ", w, "x", h, " RGB"));
    }
    int rc = av_frame_make_writable(m.frame);
    if (rc < 0) return absl::InternalError(absl::StrCat("av_frame_make_writable: ", AvError(rc)));
    // swscale's SIMD reads up to 16 bytes past a row: the frame goes through a copy with a padded tail.
    std::copy(frames[i].pixels.begin(), frames[i].pixels.end(), padded.begin());
    const uint8_t* src[4] = {padded.data(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {3 * w, 0, 0, 0};
    sws_scale(m.sws, src, src_stride, 0, h, m.frame->data, m.frame->linesize);
    m.frame->pts = static_cast<int64_t>(i);
    if (codec != "h264") m.frame->quality = m.codec->global_quality;
    RETURN_IF_ERROR(Encode(m, m.frame, path));
  }
  RETURN_IF_ERROR(Encode(m, nullptr, path));
  int rc = av_write_trailer(m.format);
  if (rc < 0) return absl::InternalError(absl::StrCat(path, ": finishing the file failed (", AvError(rc), ")"));
  return absl::OkStatus();
}

}  // namespace baton
