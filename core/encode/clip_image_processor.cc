#include "core/encode/clip_image_processor.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

// PIL's arithmetic is reproduced operation by operation; a fused multiply-add would change roundings.
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace baton {
namespace {

using Json = nlohmann::json;

// ---- PIL's resampling (Pillow src/libImaging/Resample.c, 8 bits per channel) ----

constexpr int kPrecisionBits = 32 - 8 - 2;

double FilterSupport(PilResample f) {
  switch (f) {
    case PilResample::kBox:
      return 0.5;
    case PilResample::kBilinear:
    case PilResample::kHamming:
      return 1.0;
    case PilResample::kBicubic:
      return 2.0;
    case PilResample::kLanczos:
      return 3.0;
    case PilResample::kNearest:
      break;
  }
  return 0.0;
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double FilterValue(PilResample f, double x) {
  switch (f) {
    case PilResample::kBox:
      return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
    case PilResample::kBilinear:
      if (x < 0.0) x = -x;
      return x < 1.0 ? 1.0 - x : 0.0;
    case PilResample::kHamming:
      if (x < 0.0) x = -x;
      if (x == 0.0) return 1.0;
      if (x >= 1.0) return 0.0;
      x = x * M_PI;
      return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));  // float constants, as Pillow writes them
    case PilResample::kBicubic: {
      constexpr double a = -0.5;
      if (x < 0.0) x = -x;
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
      if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
      return 0.0;
    }
    case PilResample::kLanczos:
      return (-3.0 <= x && x < 3.0) ? Sinc(x) * Sinc(x / 3) : 0.0;
    case PilResample::kNearest:
      break;
  }
  return 0.0;
}

// One axis' filter taps: output pixel i reads inputs [bounds[2i], bounds[2i] + bounds[2i+1]) with weights
// kk[i * ksize ...] in fixed point (precompute_coeffs + normalize_coeffs_8bpc).
struct AxisCoeffs {
  int ksize = 0;
  std::vector<int> bounds;
  std::vector<int32_t> kk;
};

AxisCoeffs PrecomputeCoeffs(int in_size, int out_size, PilResample filter) {
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);  // the box (0, 0, width, height)
  double scale = static_cast<double>(in1 - in0) / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = FilterSupport(filter) * filterscale;
  AxisCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  c.kk.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      const double w = FilterValue(filter, (static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = k[x] * (1 << kPrecisionBits);
      c.kk[static_cast<size_t>(xx) * c.ksize + x] = static_cast<int32_t>(k[x] < 0 ? -0.5 + v : 0.5 + v);
    }
    c.bounds[2 * xx] = xmin;
    c.bounds[2 * xx + 1] = xmax;
  }
  return c;
}

inline uint8_t Clip8(int32_t in) {
  const int32_t v = in >> kPrecisionBits;  // arithmetic shift: floor, as Pillow's table lookup
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Rows [row0, row0 + rows) of `src`, resampled to `out_width` columns.
Image HorizontalPass(const Image& src, int out_width, int row0, int rows, const AxisCoeffs& c) {
  Image out(out_width, rows);
  for (int yy = 0; yy < rows; ++yy) {
    for (int xx = 0; xx < out_width; ++xx) {
      const int xmin = c.bounds[2 * xx], xmax = c.bounds[2 * xx + 1];
      const int32_t* k = &c.kk[static_cast<size_t>(xx) * c.ksize];
      int32_t ss0 = 1 << (kPrecisionBits - 1), ss1 = ss0, ss2 = ss0;
      for (int x = 0; x < xmax; ++x) {
        const uint8_t* p = src.at(x + xmin, yy + row0);
        ss0 += p[0] * k[x];
        ss1 += p[1] * k[x];
        ss2 += p[2] * k[x];
      }
      uint8_t* o = out.at(xx, yy);
      o[0] = Clip8(ss0);
      o[1] = Clip8(ss1);
      o[2] = Clip8(ss2);
    }
  }
  return out;
}

// `src` resampled to `out_height` rows; the bounds are relative to src's first row.
Image VerticalPass(const Image& src, int out_height, const AxisCoeffs& c) {
  Image out(src.width, out_height);
  for (int yy = 0; yy < out_height; ++yy) {
    const int ymin = c.bounds[2 * yy], ymax = c.bounds[2 * yy + 1];
    const int32_t* k = &c.kk[static_cast<size_t>(yy) * c.ksize];
    for (int xx = 0; xx < src.width; ++xx) {
      int32_t ss0 = 1 << (kPrecisionBits - 1), ss1 = ss0, ss2 = ss0;
      for (int y = 0; y < ymax; ++y) {
        const uint8_t* p = src.at(xx, y + ymin);
        ss0 += p[0] * k[y];
        ss1 += p[1] * k[y];
        ss2 += p[2] * k[y];
      }
      uint8_t* o = out.at(xx, yy);
      o[0] = Clip8(ss0);
      o[1] = Clip8(ss1);
      o[2] = Clip8(ss2);
    }
  }
  return out;
}

// ---- preprocessor_config.json ----

absl::Status ReadPositive(const Json& j, const char* key, absl::string_view source, int64_t* out) {
  RETURN_IF_ERROR(ReadJsonField(j, key, source, out));
  if (*out <= 0) return absl::InvalidArgumentError(absl::StrCat(source, ": '", key, "' must be positive"));
  return absl::OkStatus();
}

absl::Status ReadSize(const Json& j, absl::string_view source, ClipImageProcessorConfig* c) {
  auto it = j.find("size");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number_integer()) return ReadPositive(j, "size", source, &c->shortest_edge);  // legacy: shortest edge
  if (!it->is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": 'size' is not an int or object"));
  const Json& s = *it;
  const std::string where = absl::StrCat(source, " (size)");
  if (s.contains("height") || s.contains("width")) {
    if (!s.contains("height") || !s.contains("width") || s.contains("shortest_edge")) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": 'size' ", s.dump(), " must hold height and width"));
    }
    c->shortest_edge = 0;
    RETURN_IF_ERROR(ReadPositive(s, "height", where, &c->resize_height));
    return ReadPositive(s, "width", where, &c->resize_width);
  }
  if (!s.contains("shortest_edge")) {
    return absl::UnimplementedError(absl::StrCat(
        source, ": 'size' ", s.dump(), " is not supported (shortest_edge [+ longest_edge], or height + width)"));
  }
  RETURN_IF_ERROR(ReadPositive(s, "shortest_edge", where, &c->shortest_edge));
  if (s.contains("longest_edge") && !s["longest_edge"].is_null()) {
    RETURN_IF_ERROR(ReadPositive(s, "longest_edge", where, &c->longest_edge));
  }
  return absl::OkStatus();
}

absl::Status ReadCropSize(const Json& j, absl::string_view source, ClipImageProcessorConfig* c) {
  auto it = j.find("crop_size");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number_integer()) {
    RETURN_IF_ERROR(ReadPositive(j, "crop_size", source, &c->crop_height));
    c->crop_width = c->crop_height;
    return absl::OkStatus();
  }
  if (!it->is_object() || !it->contains("height") || !it->contains("width")) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": 'crop_size' ", it->dump(), " must be an int or hold height and width"));
  }
  const std::string where = absl::StrCat(source, " (crop_size)");
  RETURN_IF_ERROR(ReadPositive(*it, "height", where, &c->crop_height));
  return ReadPositive(*it, "width", where, &c->crop_width);
}

// image_mean / image_std: one number for every channel, or three.
absl::Status ReadTriple(const Json& j, const char* key, absl::string_view source, std::array<double, 3>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number()) {
    out->fill(it->get<double>());
    return absl::OkStatus();
  }
  if (!it->is_array() || it->size() != 3 || !(*it)[0].is_number() || !(*it)[1].is_number() || !(*it)[2].is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": '", key, "' ", it->dump(), " must be a number or 3 numbers (RGB)"));
  }
  for (int i = 0; i < 3; ++i) (*out)[i] = (*it)[i].get<double>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Image> PilResize(const Image& src, int width, int height, PilResample filter) {
  if (width <= 0 || height <= 0 || src.width <= 0 || src.height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PilResize: bad size ", src.width, "x", src.height, " -> ", width, "x", height));
  }
  if (filter == PilResample::kNearest) {
    return absl::UnimplementedError("PilResize: PIL's NEAREST resampling is not implemented");
  }
  const bool need_horizontal = width != src.width;
  const bool need_vertical = height != src.height;
  if (!need_horizontal && !need_vertical) return src;
  // Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many pixels as the width
  // (older Pillow always went horizontal first; the two orders round differently).
  const bool horizontal_first = !(src.height - height > 0 && src.height - height > (src.width - width) * 2);
  AxisCoeffs vert = PrecomputeCoeffs(src.height, height, filter);
  if (!need_horizontal) return VerticalPass(src, height, vert);
  AxisCoeffs horiz = PrecomputeCoeffs(src.width, width, filter);
  if (!need_vertical) return HorizontalPass(src, width, 0, src.height, horiz);
  if (!horizontal_first) return HorizontalPass(VerticalPass(src, height, vert), width, 0, height, horiz);
  // Only the source rows the vertical pass reads are resampled horizontally (Pillow's ybox_first/last).
  const int first = vert.bounds[0];
  const int last = vert.bounds[2 * height - 2] + vert.bounds[2 * height - 1];
  for (int i = 0; i < height; ++i) vert.bounds[2 * i] -= first;
  Image temp = HorizontalPass(src, width, first, last - first, horiz);
  return VerticalPass(temp, height, vert);
}

absl::Status ClipImageProcessorConfig::Validate() const {
  if (do_resize) {
    if (shortest_edge <= 0 && (resize_height <= 0 || resize_width <= 0)) {
      return absl::InvalidArgumentError("CLIP image processor: the resize size must be positive");
    }
    if (longest_edge > 0 && longest_edge < shortest_edge) {
      return absl::InvalidArgumentError(
          absl::StrCat("CLIP image processor: longest_edge ", longest_edge, " is below shortest_edge ", shortest_edge));
    }
    if (resample == PilResample::kNearest) {
      return absl::UnimplementedError("CLIP image processor: resample 0 (NEAREST) is not implemented");
    }
  }
  if (do_center_crop && (crop_height <= 0 || crop_width <= 0)) {
    return absl::InvalidArgumentError("CLIP image processor: crop_size must be positive");
  }
  if (do_normalize) {
    for (double s : image_std) {
      if (!(s != 0.0)) return absl::InvalidArgumentError("CLIP image processor: image_std must be non-zero");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ClipImageProcessorConfig> ParseClipImageProcessorConfig(absl::string_view json_text,
                                                                       absl::string_view source) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  ClipImageProcessorConfig c;
  RETURN_IF_ERROR(ReadJsonField(j, "do_convert_rgb", source, &c.do_convert_rgb));
  RETURN_IF_ERROR(ReadJsonField(j, "do_resize", source, &c.do_resize));
  RETURN_IF_ERROR(ReadSize(j, source, &c));
  int resample = static_cast<int>(c.resample);
  RETURN_IF_ERROR(ReadJsonField(j, "resample", source, &resample));
  if (resample < 0 || resample > 5) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": 'resample' ", resample, " is not a PIL filter (0-5)"));
  }
  c.resample = static_cast<PilResample>(resample);
  RETURN_IF_ERROR(ReadJsonField(j, "do_center_crop", source, &c.do_center_crop));
  RETURN_IF_ERROR(ReadCropSize(j, source, &c));
  RETURN_IF_ERROR(ReadJsonField(j, "do_rescale", source, &c.do_rescale));
  RETURN_IF_ERROR(ReadJsonField(j, "rescale_factor", source, &c.rescale_factor));
  RETURN_IF_ERROR(ReadJsonField(j, "do_normalize", source, &c.do_normalize));
  RETURN_IF_ERROR(ReadTriple(j, "image_mean", source, &c.image_mean));
  RETURN_IF_ERROR(ReadTriple(j, "image_std", source, &c.image_std));
  absl::Status valid = c.Validate();
  if (!valid.ok()) return Annotate(valid, source);
  return c;
}

std::string ClipImageProcessorConfigToJson(const ClipImageProcessorConfig& c) {
  Json j;  // keys sorted, as save_pretrained's sort_keys=True
  j["crop_size"] = {{"height", c.crop_height}, {"width", c.crop_width}};
  j["do_center_crop"] = c.do_center_crop;
  j["do_convert_rgb"] = c.do_convert_rgb;
  j["do_normalize"] = c.do_normalize;
  j["do_rescale"] = c.do_rescale;
  j["do_resize"] = c.do_resize;
  j["image_mean"] = c.image_mean;
  j["image_processor_type"] = "CLIPImageProcessor";
  j["image_std"] = c.image_std;
  j["resample"] = static_cast<int>(c.resample);
  j["rescale_factor"] = c.rescale_factor;
  if (c.shortest_edge > 0) {
    j["size"] = {{"shortest_edge", c.shortest_edge}};
    if (c.longest_edge > 0) j["size"]["longest_edge"] = c.longest_edge;
  } else {
    j["size"] = {{"height", c.resize_height}, {"width", c.resize_width}};
  }
  return j.dump(2) + "\n";
}

absl::Status WriteClipImageProcessorConfig(const ClipImageProcessorConfig& config, const std::string& dir) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(MakeDirs(dir));
  return WriteFileAtomic(JoinPath(dir, "preprocessor_config.json"), ClipImageProcessorConfigToJson(config));
}

ClipImageProcessorConfig ClipImageProcessorConfigForSize(int64_t image_size) {
  ClipImageProcessorConfig c;
  c.shortest_edge = image_size;
  c.crop_height = c.crop_width = image_size;
  return c;
}

absl::StatusOr<ClipImageProcessor> ClipImageProcessor::Load(const std::string& path) {
  const std::string file = IsDirectory(path) ? JoinPath(path, "preprocessor_config.json") : path;
  ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  ASSIGN_OR_RETURN(ClipImageProcessorConfig config, ParseClipImageProcessorConfig(text, file));
  return ClipImageProcessor(std::move(config));
}

std::pair<int64_t, int64_t> ClipImageProcessor::ResizedSize(int64_t height, int64_t width) const {
  const ClipImageProcessorConfig& c = config_;
  if (!c.do_resize) return {height, width};
  if (c.shortest_edge <= 0) return {c.resize_height, c.resize_width};
  if (c.longest_edge <= 0) {  // get_resize_output_image_size(default_to_square=False)
    const int64_t s = std::min(height, width), l = std::max(height, width);
    const int64_t new_long = static_cast<int64_t>(static_cast<double>(c.shortest_edge * l) / static_cast<double>(s));
    return width <= height ? std::make_pair(new_long, c.shortest_edge) : std::make_pair(c.shortest_edge, new_long);
  }
  // get_size_with_aspect_ratio((height, width), shortest_edge, longest_edge)
  int64_t size = c.shortest_edge;
  double raw_size = 0;
  bool have_raw = false;
  const double min_side = static_cast<double>(std::min(height, width));
  const double max_side = static_cast<double>(std::max(height, width));
  if (max_side / min_side * static_cast<double>(size) > static_cast<double>(c.longest_edge)) {
    raw_size = static_cast<double>(c.longest_edge) * min_side / max_side;
    size = static_cast<int64_t>(std::nearbyint(raw_size));  // Python's round(): ties to even
    have_raw = true;
  }
  if ((height <= width && height == size) || (width <= height && width == size)) return {height, width};
  if (width < height) {
    const double oh = have_raw ? raw_size * static_cast<double>(height) / static_cast<double>(width)
                               : static_cast<double>(size * height) / static_cast<double>(width);
    return {static_cast<int64_t>(oh), size};
  }
  const double ow = have_raw ? raw_size * static_cast<double>(width) / static_cast<double>(height)
                             : static_cast<double>(size * width) / static_cast<double>(height);
  return {size, static_cast<int64_t>(ow)};
}

absl::StatusOr<at::Tensor> ClipImageProcessor::Preprocess(const Image& image) const {
  const ClipImageProcessorConfig& c = config_;
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("CLIP preprocess: not an RGB8 image (", image.width, "x", image.height, ")"));
  }
  Image resized;
  const Image* img = &image;
  if (c.do_resize) {
    auto [h, w] = ResizedSize(image.height, image.width);
    if (h <= 0 || w <= 0 || h > kMaxImageSide || w > kMaxImageSide) {
      return absl::InvalidArgumentError(
          absl::StrCat("CLIP preprocess: a ", image.width, "x", image.height, " image would resize to ", w, "x", h));
    }
    ASSIGN_OR_RETURN(resized, PilResize(image, static_cast<int>(w), static_cast<int>(h), c.resample));
    img = &resized;
  }
  // transformers' center_crop: offsets (size - crop) // 2 (floor), rows/columns outside the image are zeros.
  const int64_t out_h = c.do_center_crop ? c.crop_height : img->height;
  const int64_t out_w = c.do_center_crop ? c.crop_width : img->width;
  const int64_t top = c.do_center_crop ? static_cast<int64_t>(std::floor((img->height - out_h) / 2.0)) : 0;
  const int64_t left = c.do_center_crop ? static_cast<int64_t>(std::floor((img->width - out_w) / 2.0)) : 0;
  float mean[3], std_dev[3];
  for (int ch = 0; ch < 3; ++ch) {
    mean[ch] = static_cast<float>(c.image_mean[ch]);
    std_dev[ch] = static_cast<float>(c.image_std[ch]);
  }
  // uint8 → float32 value: rescale in float64 then cast (transformers' rescale), normalise in float32.
  float table[3][256];
  for (int ch = 0; ch < 3; ++ch) {
    for (int v = 0; v < 256; ++v) {
      float x = c.do_rescale ? static_cast<float>(static_cast<double>(v) * c.rescale_factor) : static_cast<float>(v);
      if (c.do_normalize) x = (x - mean[ch]) / std_dev[ch];
      table[ch][v] = x;
    }
  }
  at::Tensor out = at::empty({1, 3, out_h, out_w}, at::kFloat);
  float* dst = out.data_ptr<float>();
  for (int64_t y = 0; y < out_h; ++y) {
    const int64_t sy = y + top;
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t sx = x + left;
      const bool inside = sy >= 0 && sy < img->height && sx >= 0 && sx < img->width;
      const uint8_t* p = inside ? img->at(static_cast<int>(sx), static_cast<int>(sy)) : nullptr;
      for (int ch = 0; ch < 3; ++ch) dst[(ch * out_h + y) * out_w + x] = table[ch][inside ? p[ch] : 0];
    }
  }
  return out;
}

absl::StatusOr<at::Tensor> ClipImageProcessor::Preprocess(const std::vector<Image>& images) const {
  if (images.empty()) return absl::InvalidArgumentError("CLIP preprocess: no images");
  std::vector<at::Tensor> rows;
  for (size_t i = 0; i < images.size(); ++i) {
    ASSIGN_OR_RETURN(at::Tensor t, Preprocess(images[i]));
    if (!rows.empty() && t.sizes() != rows.front().sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("CLIP preprocess: image ", i, " comes out ", t.size(2), "x",
                                                     t.size(3), ", image 0 ", rows.front().size(2), "x",
                                                     rows.front().size(3), " (no center crop?)"));
    }
    rows.push_back(std::move(t));
  }
  return at::cat(rows, 0);
}

}  // namespace baton
