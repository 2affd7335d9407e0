#include "core/sample/sample_images.h"

#include <algorithm>
#include <cmath>

namespace baton {

Image PixelsToImage(const at::Tensor& pixels) {
  // VaeImageProcessor.postprocess: (x / 2 + 0.5).clamp(0, 1); numpy_to_pil: (x · 255).round() as uint8.
  at::Tensor x = (pixels.to(at::kCPU, at::kFloat) / 2 + 0.5).clamp(0, 1);
  at::Tensor bytes = (x * 255).round().to(at::kByte).permute({1, 2, 0}).contiguous();
  Image image(static_cast<int>(bytes.size(1)), static_cast<int>(bytes.size(0)));
  std::copy(bytes.data_ptr<uint8_t>(), bytes.data_ptr<uint8_t>() + bytes.numel(), image.pixels.begin());
  return image;
}

Image ContactSheet(const std::vector<Image>& images, int columns) {
  constexpr int kBorder = 4;
  const int n = static_cast<int>(images.size());
  if (n == 0) return Image();
  if (columns <= 0) columns = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
  columns = std::min(columns, n);
  const int rows = (n + columns - 1) / columns;
  int cw = 0, ch = 0;
  for (const Image& im : images) {
    cw = std::max(cw, im.width);
    ch = std::max(ch, im.height);
  }
  Image sheet(columns * cw + (columns + 1) * kBorder, rows * ch + (rows + 1) * kBorder);
  std::fill(sheet.pixels.begin(), sheet.pixels.end(), uint8_t{255});
  for (int i = 0; i < n; ++i) {
    const Image& im = images[i];
    const int x0 = kBorder + (i % columns) * (cw + kBorder) + (cw - im.width) / 2;
    const int y0 = kBorder + (i / columns) * (ch + kBorder) + (ch - im.height) / 2;
    for (int y = 0; y < im.height; ++y) std::copy(im.at(0, y), im.at(0, y) + 3 * im.width, sheet.at(x0, y0 + y));
  }
  return sheet;
}

}  // namespace baton
