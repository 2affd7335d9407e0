// Resampling and cropping for Image (declared in image.h).
#include <algorithm>
#include <cassert>
#include <cmath>

#include "core/image/image.h"

namespace baton {
namespace {

// Sparse resampling matrix for one axis: output i = sum_k weight[i][k] * input[first[i] + k].
struct AxisWeights {
  std::vector<int> first;
  std::vector<std::vector<float>> weights;
};

AxisWeights MakeAxisWeights(int in, int out) {
  AxisWeights a;
  a.first.resize(out);
  a.weights.resize(out);
  if (out < in) {
    // Area averaging: output pixel i covers input interval [i*s, (i+1)*s), s = in/out; each input
    // pixel contributes the length of its overlap with that interval, divided by s.
    double s = static_cast<double>(in) / out;
    for (int i = 0; i < out; ++i) {
      double lo = i * s, hi = (i + 1) * s;
      int j0 = static_cast<int>(std::floor(lo));
      int j1 = std::min(in, static_cast<int>(std::ceil(hi)));
      a.first[i] = j0;
      for (int j = j0; j < j1; ++j) {
        double overlap = std::min<double>(hi, j + 1) - std::max<double>(lo, j);
        a.weights[i].push_back(static_cast<float>(std::max(0.0, overlap) / s));
      }
    }
  } else {
    // Bilinear with half-pixel centers, clamped at the borders; in == out gives weight 1 on i.
    double s = static_cast<double>(in) / out;
    for (int i = 0; i < out; ++i) {
      double src = std::clamp((i + 0.5) * s - 0.5, 0.0, static_cast<double>(in - 1));
      int j0 = static_cast<int>(std::floor(src));
      double t = src - j0;
      a.first[i] = j0;
      if (t > 0 && j0 + 1 < in) {
        a.weights[i] = {static_cast<float>(1 - t), static_cast<float>(t)};
      } else {
        a.weights[i] = {1.0f};
      }
    }
  }
  return a;
}

uint8_t ToByte(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l)); }

}  // namespace

Image ResizeImage(const Image& src, int width, int height) {
  assert(width > 0 && height > 0 && src.width > 0 && src.height > 0);
  if (width == src.width && height == src.height) return src;
  AxisWeights wx = MakeAxisWeights(src.width, width);
  AxisWeights wy = MakeAxisWeights(src.height, height);
  // Horizontal pass into float: [src.height, width, 3].
  std::vector<float> tmp(static_cast<size_t>(src.height) * width * 3, 0.0f);
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* row = src.at(0, y);
    float* out = &tmp[static_cast<size_t>(y) * width * 3];
    for (int x = 0; x < width; ++x) {
      float acc[3] = {0, 0, 0};
      const std::vector<float>& w = wx.weights[x];
      for (size_t k = 0; k < w.size(); ++k) {
        const uint8_t* p = row + static_cast<size_t>(wx.first[x] + k) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * p[c];
      }
      for (int c = 0; c < 3; ++c) out[x * 3 + c] = acc[c];
    }
  }
  // Vertical pass: [height, width, 3].
  Image dst(width, height);
  const size_t stride = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    const std::vector<float>& w = wy.weights[y];
    uint8_t* out = dst.at(0, y);
    for (size_t i = 0; i < stride; ++i) {
      float acc = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        acc += w[k] * tmp[static_cast<size_t>(wy.first[y] + k) * stride + i];
      }
      out[i] = ToByte(acc);
    }
  }
  return dst;
}

Image CenterCrop(const Image& src, int width, int height) {
  assert(width > 0 && height > 0 && width <= src.width && height <= src.height);
  int x0 = (src.width - width) / 2;
  int y0 = (src.height - height) / 2;
  Image dst(width, height);
  for (int y = 0; y < height; ++y) {
    std::copy_n(src.at(x0, y0 + y), static_cast<size_t>(width) * 3, dst.at(0, y));
  }
  return dst;
}

at::Tensor ImageToPixels(const Image& image) {
  at::Tensor t = at::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3}, at::kByte);
  return t.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat).div(127.5).sub(1.0).contiguous();
}

}  // namespace baton
