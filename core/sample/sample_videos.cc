#include "core/sample/sample_videos.h"

#include <algorithm>

#include "core/sample/sample_images.h"
#include "core/video/video_io.h"

namespace baton {

std::vector<Image> VideoFrames(const at::Tensor& pixels) {
  std::vector<Image> frames;
  for (int64_t f = 0; f < pixels.size(1); ++f) frames.push_back(PixelsToImage(pixels.select(1, f)));
  return frames;
}

absl::Status WriteSampleVideo(const std::string& path, const std::vector<Image>& frames, int fps) {
  // H.264, which browsers play (the job's page shows it); MPEG-4 part 2 where libavcodec lacks an H.264 encoder.
  absl::Status h264 = WriteVideoFile(path, frames, fps, "h264");
  return absl::IsUnimplemented(h264) ? WriteVideoFile(path, frames, fps, "mpeg4") : h264;
}

Image VideoContactSheet(const std::vector<std::vector<Image>>& videos, int per_video) {
  per_video = std::max(per_video, 1);
  int columns = 1;
  for (const std::vector<Image>& v : videos)
    columns = std::max(columns, std::min(per_video, static_cast<int>(v.size())));
  // One row per video; a shorter video's row is padded with white cells so every video starts a row.
  std::vector<Image> cells;
  for (const std::vector<Image>& v : videos) {
    const int n = static_cast<int>(v.size()), take = std::min(per_video, n);
    for (int i = 0; i < columns; ++i) {
      if (i < take) {
        cells.push_back(v[static_cast<size_t>(take == 1 ? 0 : (static_cast<int64_t>(i) * (n - 1)) / (take - 1))]);
      } else if (!cells.empty()) {
        Image blank = cells.back();
        std::fill(blank.pixels.begin(), blank.pixels.end(), 255);
        cells.push_back(blank);
      }
    }
  }
  return ContactSheet(cells, columns);
}

}  // namespace baton
