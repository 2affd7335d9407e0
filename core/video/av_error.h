// FFmpeg's text for one of its error codes, as video_io.cc and video_writer.cc put it in their messages. Only those
// two files include it (they already link libavutil).
#pragma once

extern "C" {
#include <libavutil/error.h>
}

#include <string>

namespace baton {

inline std::string AvError(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

}  // namespace baton
