#include "core/image/image.h"

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/util/files.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// Writes a PNG of any color type / bit depth straight through libpng, so the decoder's
// conversions are tested against files it did not write itself. `rows` holds packed samples.
std::string RawPng(int w, int h, int color_type, int bit_depth, const std::vector<uint8_t>& data,
                   const std::vector<png_color>& palette = {}, bool interlaced = false,
                   const std::vector<png_byte>& palette_alpha = {}) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(d), n);
      },
      [](png_structp) {});
  png_set_IHDR(png, info, w, h, bit_depth, color_type, interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), palette.size());
  if (!palette_alpha.empty()) {
    png_set_tRNS(png, info, palette_alpha.data(), static_cast<int>(palette_alpha.size()), nullptr);
  }
  png_write_info(png, info);
  size_t row_bytes = data.size() / h;
  std::vector<png_bytep> rows(h);
  for (int y = 0; y < h; ++y) rows[y] = const_cast<uint8_t*>(data.data()) + y * row_bytes;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string RawJpeg(int w, int h, int components, J_COLOR_SPACE space, const std::vector<uint8_t>& data) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = components;
  cinfo.in_color_space = space;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(data.data()) + cinfo.next_scanline * w * components;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

Image Gradient(int w, int h) {
  Image img(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.at(x, y);
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = static_cast<uint8_t>((x + y) * 4);
    }
  }
  return img;
}

std::vector<uint8_t> Px(const Image& img, int x, int y) {
  const uint8_t* p = img.at(x, y);
  return {p[0], p[1], p[2]};
}

TEST(ImageTest, DetectsFormatByMagicBytes) {
  std::string png = *EncodePng(Gradient(4, 4));
  std::string jpg = *EncodeJpeg(Gradient(4, 4));
  EXPECT_EQ(DetectImageFormat(png), ImageFormat::kPng);
  EXPECT_EQ(DetectImageFormat(jpg), ImageFormat::kJpeg);
  EXPECT_EQ(DetectImageFormat(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)), ImageFormat::kWebp);
  EXPECT_EQ(DetectImageFormat("GIF89a..."), ImageFormat::kGif);
  EXPECT_EQ(DetectImageFormat("just some text"), ImageFormat::kUnknown);
  EXPECT_EQ(DetectImageFormat(""), ImageFormat::kUnknown);
}

TEST(ImageTest, PngRoundTripIsExact) {
  Image img(13, 7);
  std::mt19937 rng(3);
  for (uint8_t& v : img.pixels) v = static_cast<uint8_t>(rng());
  auto decoded = DecodeImage(*EncodePng(img), "mem.png");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->width, 13);
  EXPECT_EQ(decoded->height, 7);
  EXPECT_EQ(decoded->pixels, img.pixels);
}

TEST(ImageTest, PngColorTypesBecomeRgb8) {
  // Gray 8-bit: v -> (v, v, v).
  auto gray = DecodeImage(RawPng(2, 1, PNG_COLOR_TYPE_GRAY, 8, {10, 200}), "g.png");
  ASSERT_TRUE(gray.ok()) << gray.status();
  EXPECT_EQ(Px(*gray, 1, 0), std::vector<uint8_t>({200, 200, 200}));
  // Gray 1-bit, 8 pixels packed MSB first in one byte: 0b10100000 -> 255, 0, 255, 0...
  auto bits = DecodeImage(RawPng(8, 1, PNG_COLOR_TYPE_GRAY, 1, {0xA0}), "b.png");
  ASSERT_TRUE(bits.ok()) << bits.status();
  EXPECT_EQ(Px(*bits, 0, 0), std::vector<uint8_t>({255, 255, 255}));
  EXPECT_EQ(Px(*bits, 1, 0), std::vector<uint8_t>({0, 0, 0}));
  // Palette: indices into PLTE.
  std::vector<png_color> palette = {{1, 2, 3}, {250, 128, 7}};
  auto pal = DecodeImage(RawPng(2, 1, PNG_COLOR_TYPE_PALETTE, 8, {1, 0}, palette), "p.png");
  ASSERT_TRUE(pal.ok()) << pal.status();
  EXPECT_EQ(Px(*pal, 0, 0), std::vector<uint8_t>({250, 128, 7}));
  EXPECT_EQ(Px(*pal, 1, 0), std::vector<uint8_t>({1, 2, 3}));
  // Palette with transparency (tRNS; PIL "P" images saved with transparency=, pngquant): the palette's colors, as
  // PIL's convert("RGB") gives them; the expanded alpha dropped.
  auto trns = DecodeImage(RawPng(2, 1, PNG_COLOR_TYPE_PALETTE, 8, {1, 0}, palette, false, {0}), "t.png");
  ASSERT_TRUE(trns.ok()) << trns.status();
  EXPECT_EQ(Px(*trns, 0, 0), std::vector<uint8_t>({250, 128, 7}));
  EXPECT_EQ(Px(*trns, 1, 0), std::vector<uint8_t>({1, 2, 3}));
  // RGBA: alpha dropped, color kept (PIL convert("RGB")).
  auto rgba = DecodeImage(RawPng(1, 1, PNG_COLOR_TYPE_RGBA, 8, {9, 8, 7, 0}), "a.png");
  ASSERT_TRUE(rgba.ok()) << rgba.status();
  EXPECT_EQ(Px(*rgba, 0, 0), std::vector<uint8_t>({9, 8, 7}));
  auto ga = DecodeImage(RawPng(1, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, {77, 3}), "ga.png");
  ASSERT_TRUE(ga.ok()) << ga.status();
  EXPECT_EQ(Px(*ga, 0, 0), std::vector<uint8_t>({77, 77, 77}));
  // RGB 16-bit big-endian: keeps the high byte.
  auto deep = DecodeImage(RawPng(1, 1, PNG_COLOR_TYPE_RGB, 16, {0xAB, 0xCD, 0x12, 0x34, 0xFF, 0x00}), "d.png");
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(Px(*deep, 0, 0), std::vector<uint8_t>({0xAB, 0x12, 0xFF}));
}

TEST(ImageTest, InterlacedPngDecodes) {
  Image img = Gradient(11, 9);
  auto decoded = DecodeImage(RawPng(11, 9, PNG_COLOR_TYPE_RGB, 8, img.pixels, {}, /*interlaced=*/true), "i.png");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->pixels, img.pixels);
}

TEST(ImageTest, JpegDecodesCloseToSource) {
  Image img = Gradient(40, 24);
  auto decoded = DecodeImage(*EncodeJpeg(img, 95), "x.jpg");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->width, 40);
  ASSERT_EQ(decoded->height, 24);
  int max_err = 0;
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    max_err = std::max(max_err, std::abs(int{img.pixels[i]} - int{decoded->pixels[i]}));
  }
  EXPECT_LE(max_err, 12);  // lossy, but a smooth gradient at quality 95 stays close
  // Grayscale JPEG comes out with R = G = B.
  std::vector<uint8_t> g(16 * 8);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<uint8_t>(i * 2);
  auto gray = DecodeImage(RawJpeg(16, 8, 1, JCS_GRAYSCALE, g), "g.jpg");
  ASSERT_TRUE(gray.ok()) << gray.status();
  const uint8_t* p = gray->at(5, 3);
  EXPECT_EQ(p[0], p[1]);
  EXPECT_EQ(p[1], p[2]);
  EXPECT_NEAR(p[0], g[3 * 16 + 5], 6);
}

TEST(ImageTest, CmykJpegIsRejectedClearly) {
  std::vector<uint8_t> cmyk(8 * 8 * 4, 100);
  auto r = DecodeImage(RawJpeg(8, 8, 4, JCS_CMYK, cmyk), "print.jpg");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("print.jpg"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("CMYK"));
}

TEST(ImageTest, BadInputsAreErrorsNamingTheFile) {
  std::string png = *EncodePng(Gradient(64, 64));
  std::string jpg = *EncodeJpeg(Gradient(64, 64));
  auto expect_bad = [](absl::string_view bytes, absl::StatusCode code, const std::string& needle) {
    auto r = DecodeImage(bytes, "/data/img_7.png");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("/data/img_7.png"));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(needle));
  };
  expect_bad("", absl::StatusCode::kInvalidArgument, "zero-byte");
  expect_bad("hello, I am a caption", absl::StatusCode::kInvalidArgument, "not a recognized image");
  expect_bad(png.substr(0, png.size() / 2), absl::StatusCode::kInvalidArgument, "bad PNG");
  expect_bad(png.substr(0, 20), absl::StatusCode::kInvalidArgument, "bad PNG");
  expect_bad(jpg.substr(0, jpg.size() / 2), absl::StatusCode::kInvalidArgument, "bad JPEG");
  expect_bad(jpg.substr(0, 3), absl::StatusCode::kInvalidArgument, "bad JPEG");
  expect_bad(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16), absl::StatusCode::kUnimplemented, "WebP");

  std::string corrupt_png = png;  // flip bytes inside IDAT: CRC or zlib error
  size_t idat = corrupt_png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  for (size_t i = idat + 8; i < idat + 40; ++i) corrupt_png[i] ^= 0x5A;
  expect_bad(corrupt_png, absl::StatusCode::kInvalidArgument, "bad PNG");

  std::string corrupt_jpg = jpg;  // garbage in the entropy-coded data after the SOS header
  size_t sos = corrupt_jpg.find("\xFF\xDA");
  ASSERT_NE(sos, std::string::npos);
  std::mt19937 rng(11);
  for (size_t i = sos + 20; i < corrupt_jpg.size() - 2; ++i) corrupt_jpg[i] = static_cast<char>(rng());
  expect_bad(corrupt_jpg, absl::StatusCode::kInvalidArgument, "bad JPEG");
}

TEST(ImageTest, ReadImageInfoFromHeaders) {
  auto png = ReadImageInfo(*EncodePng(Gradient(31, 17)), "a.png");
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->format, ImageFormat::kPng);
  EXPECT_EQ(png->width, 31);
  EXPECT_EQ(png->height, 17);
  auto jpg = ReadImageInfo(*EncodeJpeg(Gradient(33, 5)), "a.jpg");
  ASSERT_TRUE(jpg.ok()) << jpg.status();
  EXPECT_EQ(jpg->format, ImageFormat::kJpeg);
  EXPECT_EQ(jpg->width, 33);
  EXPECT_EQ(jpg->height, 5);
  EXPECT_FALSE(ReadImageInfo("", "e.png").ok());
  EXPECT_FALSE(ReadImageInfo("\x89PNG\r\n\x1a\n", "short.png").ok());
}

TEST(ImageTest, FileRoundTripAndMissingFile) {
  std::string dir = (std::filesystem::temp_directory_path() / absl::StrCat("baton_image_test_", ::getpid())).string();
  ASSERT_TRUE(MakeDirs(dir).ok());
  std::string path = JoinPath(dir, "g.png");
  Image img = Gradient(5, 6);
  ASSERT_TRUE(WritePng(path, img).ok());
  auto back = ReadImageFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pixels, img.pixels);
  auto missing = ReadImageFile(JoinPath(dir, "nope.png"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.png"));
  ASSERT_TRUE(RemoveAll(dir).ok());
}

Image Row(const std::vector<uint8_t>& gray) {
  Image img(static_cast<int>(gray.size()), 1);
  for (size_t i = 0; i < gray.size(); ++i) {
    for (int c = 0; c < 3; ++c) img.pixels[i * 3 + c] = gray[i];
  }
  return img;
}

TEST(ResizeTest, DownscaleAveragesCoveredArea) {
  // Exact 2x: mean of each 2x2 block.
  Image img(4, 2);
  const uint8_t v[2][4] = {{0, 10, 100, 200}, {20, 30, 50, 0}};
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 4; ++x) img.at(x, y)[0] = img.at(x, y)[1] = img.at(x, y)[2] = v[y][x];
  }
  Image half = ResizeImage(img, 2, 1);
  EXPECT_EQ(half.at(0, 0)[0], 15);  // (0+10+20+30)/4
  EXPECT_EQ(half.at(1, 0)[0], 88);  // (100+200+50+0)/4 = 87.5 -> 88
  // 3 -> 2: output 0 covers [0, 1.5): 2/3 of px0 + 1/3 of px1.
  Image r = ResizeImage(Row({0, 90, 180}), 2, 1);
  EXPECT_EQ(r.at(0, 0)[0], 30);
  EXPECT_EQ(r.at(1, 0)[0], 150);
}

TEST(ResizeTest, UpscaleIsBilinearWithHalfPixelCenters) {
  // 2 -> 4: sample positions -0.25, 0.25, 0.75, 1.25 clamp to 0, 0.25, 0.75, 1.
  Image r = ResizeImage(Row({0, 255}), 4, 1);
  EXPECT_EQ(r.at(0, 0)[0], 0);
  EXPECT_EQ(r.at(1, 0)[0], 64);   // 63.75
  EXPECT_EQ(r.at(2, 0)[0], 191);  // 191.25
  EXPECT_EQ(r.at(3, 0)[0], 255);
}

TEST(ResizeTest, ConstantImageStaysConstantAndSameSizeIsCopy) {
  Image flat(37, 23);
  for (size_t i = 0; i < flat.pixels.size(); i += 3) {
    flat.pixels[i] = 200, flat.pixels[i + 1] = 17, flat.pixels[i + 2] = 255;
  }
  for (auto [w, h] : {std::pair{16, 16}, {50, 9}, {100, 64}, {1, 1}}) {
    Image r = ResizeImage(flat, w, h);
    ASSERT_EQ(r.width, w);
    ASSERT_EQ(r.height, h);
    for (size_t i = 0; i < r.pixels.size(); i += 3) {
      ASSERT_EQ(Px(r, (i / 3) % w, (i / 3) / w), std::vector<uint8_t>({200, 17, 255}));
    }
  }
  Image g = Gradient(9, 4);
  EXPECT_EQ(ResizeImage(g, 9, 4).pixels, g.pixels);
}

TEST(ResizeTest, CenterCropTakesTheMiddle) {
  Image g = Gradient(10, 7);
  Image c = CenterCrop(g, 4, 3);
  ASSERT_EQ(c.width, 4);
  ASSERT_EQ(c.height, 3);
  EXPECT_EQ(Px(c, 0, 0), Px(g, 3, 2));  // x0 = (10-4)/2, y0 = (7-3)/2
  EXPECT_EQ(Px(c, 3, 2), Px(g, 6, 4));
}

}  // namespace
}  // namespace baton
