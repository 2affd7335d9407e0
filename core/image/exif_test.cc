#include "core/image/exif.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/image/image.h"

namespace baton {
namespace {

// A TIFF block with IFD0 holding a Make tag (ASCII, value elsewhere) then Orientation, written by hand in
// either byte order so the parser is tested on bytes it did not produce.
std::string Tiff(bool little, uint16_t type, uint32_t count, uint32_t value) {
  std::string out;
  auto u16 = [&](uint16_t v) {
    out += little ? std::string{char(v & 0xFF), char(v >> 8)} : std::string{char(v >> 8), char(v & 0xFF)};
  };
  auto u32 = [&](uint32_t v) {
    if (little) {
      u16(v & 0xFFFF);
      u16(v >> 16);
    } else {
      u16(v >> 16);
      u16(v & 0xFFFF);
    }
  };
  out += little ? "II" : "MM";
  u16(42);
  u32(8);  // IFD0 right after the header
  u16(2);  // entries
  u16(0x010F);
  u16(2);  // ASCII
  u32(6);
  u32(8 + 2 + 2 * 12 + 4);  // points past the IFD
  u16(0x0112);
  u16(type);
  u32(count);
  if (type == 3) {  // SHORT: left-justified in the 4-byte value field
    u16(static_cast<uint16_t>(value));
    u16(0);
  } else {
    u32(value);
  }
  u32(0);  // no next IFD
  out += std::string("Canon\0", 6);
  return out;
}

std::string Be16(size_t v) { return std::string{char((v >> 8) & 0xFF), char(v & 0xFF)}; }
std::string Be32(uint32_t v) { return Be16(v >> 16) + Be16(v & 0xFFFF); }

// A little-endian TIFF block with its IFD0 offset replaced.
std::string WithIfdOffset(std::string tiff_le, uint32_t offset) {
  for (int i = 0; i < 4; ++i) tiff_le[4 + i] = static_cast<char>((offset >> (8 * i)) & 0xFF);
  return tiff_le;
}

// An APP1 "Exif\0\0" segment right after SOI.
std::string WithExifSegment(const std::string& jpeg, const std::string& tiff) {
  std::string payload = std::string("Exif\0\0", 6) + tiff;
  return jpeg.substr(0, 2) + "\xFF\xE1" + Be16(payload.size() + 2) + payload + jpeg.substr(2);
}

uint32_t Crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// An eXIf chunk (with a valid CRC) right after IHDR.
std::string WithExifChunk(const std::string& png, const std::string& tiff) {
  const size_t after_ihdr = 8 + 12 + 13;
  std::string body = "eXIf" + tiff;
  return png.substr(0, after_ihdr) + Be32(tiff.size()) + body + Be32(Crc32(body)) + png.substr(after_ihdr);
}

// 16x8 in 8x8 blocks of two clearly different colors plus a gradient inside, so every transform differs.
Image TestPicture(int w = 16, int h = 8) {
  Image img(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.at(x, y);
      p[0] = static_cast<uint8_t>(x < w / 2 ? 40 + 4 * y : 200 - 4 * y);
      p[1] = static_cast<uint8_t>(10 * x);
      p[2] = static_cast<uint8_t>(30 * y);
    }
  }
  return img;
}

// The 3x2 picture  a b c / d e f  (one gray level per letter) and what each orientation must display,
// written out from the EXIF specification's pictures rather than from a formula.
TEST(ExifTest, EachOrientationDisplaysAsTheSpecificationDraws) {
  Image img(3, 2);
  const std::vector<uint8_t> letters = {'a', 'b', 'c', 'd', 'e', 'f'};
  for (int i = 0; i < 6; ++i) img.at(i % 3, i / 3)[0] = letters[i];
  struct Case {
    int orientation;
    int w, h;
    std::string rows;
  };
  const std::vector<Case> cases = {
      {1, 3, 2, "abcdef"}, {2, 3, 2, "cbafed"}, {3, 3, 2, "fedcba"}, {4, 3, 2, "defabc"},
      {5, 2, 3, "adbecf"}, {6, 2, 3, "daebfc"}, {7, 2, 3, "fcebda"}, {8, 2, 3, "cfbead"},
  };
  for (const Case& c : cases) {
    Image out = ApplyExifOrientation(img, c.orientation);
    ASSERT_EQ(out.width, c.w) << c.orientation;
    ASSERT_EQ(out.height, c.h) << c.orientation;
    std::string got;
    for (int y = 0; y < out.height; ++y)
      for (int x = 0; x < out.width; ++x) got += static_cast<char>(out.at(x, y)[0]);
    EXPECT_EQ(got, c.rows) << "orientation " << c.orientation;
  }
  EXPECT_EQ(ApplyExifOrientation(img, 0).pixels, img.pixels);
  EXPECT_EQ(ApplyExifOrientation(img, 9).pixels, img.pixels);
}

TEST(ExifTest, JpegWithEachOrientationDecodesTransformedInBothByteOrders) {
  const std::string jpeg = *EncodeJpeg(TestPicture(), 95);
  auto stored = DecodeImage(jpeg, "plain.jpg");
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (bool little : {true, false}) {
    for (int o = 1; o <= 8; ++o) {
      for (uint16_t type : {uint16_t{3}, uint16_t{4}}) {  // SHORT (what cameras write) and LONG
        const std::string file = WithExifSegment(jpeg, Tiff(little, type, 1, o));
        SCOPED_TRACE(::testing::Message() << (little ? "II" : "MM") << " type " << type << " orientation " << o);
        EXPECT_EQ(ReadExifOrientation(file), o);
        auto shown = DecodeImage(file, "phone.jpg");
        ASSERT_TRUE(shown.ok()) << shown.status();
        // The same entropy-coded data decodes to the same stored pixels, so the oriented result is exact.
        Image expected = ApplyExifOrientation(*stored, o);
        EXPECT_EQ(shown->width, expected.width);
        EXPECT_EQ(shown->height, expected.height);
        EXPECT_EQ(shown->pixels, expected.pixels);
        auto raw = DecodeImage(file, "phone.jpg", ExifOrientationMode::kIgnore);
        ASSERT_TRUE(raw.ok());
        EXPECT_EQ(raw->pixels, stored->pixels);
        auto info = ReadImageInfo(file, "phone.jpg");
        ASSERT_TRUE(info.ok()) << info.status();
        EXPECT_EQ(info->orientation, o);
        EXPECT_EQ(info->width, o >= 5 ? 8 : 16);
        EXPECT_EQ(info->height, o >= 5 ? 16 : 8);
      }
    }
  }
}

TEST(ExifTest, PngExifChunkIsApplied) {
  const Image img = TestPicture();
  const std::string png = *EncodePng(img);
  for (int o = 1; o <= 8; ++o) {
    const std::string file = WithExifChunk(png, Tiff(o % 2 == 0, 3, 1, o));
    EXPECT_EQ(ReadExifOrientation(file), o);
    auto shown = DecodeImage(file, "x.png");
    ASSERT_TRUE(shown.ok()) << shown.status();
    Image expected = ApplyExifOrientation(img, o);  // PNG is lossless: against the source pixels
    EXPECT_EQ(shown->width, expected.width);
    EXPECT_EQ(shown->pixels, expected.pixels) << "orientation " << o;
  }
  // PIL also accepts an "Exif\0\0" prefix inside eXIf.
  EXPECT_EQ(ReadExifOrientation(WithExifChunk(png, std::string("Exif\0\0", 6) + Tiff(true, 3, 1, 6))), 6);
}

TEST(ExifTest, MalformedExifIsIgnoredAndTheImageStillDecodes) {
  const std::string jpeg = *EncodeJpeg(TestPicture(), 90);
  const std::string good = Tiff(true, 3, 1, 6);
  std::vector<std::pair<std::string, std::string>> bad_tiffs = {
      {"empty", ""},
      {"short header", "II*"},
      {"bad byte order mark", "IM" + good.substr(2)},
      {"bad magic", "II\x2B" + good.substr(3)},
      {"IFD offset past the end", WithIfdOffset(good, 0xFFFFFFF0u)},
      {"IFD offset at the last byte", WithIfdOffset(good, good.size() - 1)},
      {"entries cut off", good.substr(0, 8 + 2 + 12 + 5)},
      {"wrong type (ASCII)", Tiff(true, 2, 1, 6)},
      {"count 2", Tiff(true, 3, 2, 6)},
      {"value 0", Tiff(true, 3, 1, 0)},
      {"value 9", Tiff(false, 3, 1, 9)},
      {"value 0xFFFFFFFF (LONG)", Tiff(false, 4, 1, 0xFFFFFFFFu)},
  };
  {
    // 65535 entries declared, two present: the complete entries count, as in PIL (which keeps the tags it read
    // before running out of data; checked with Pillow 13: exif_transpose rotates such a file).
    std::string huge_count = good;
    huge_count[8] = huge_count[9] = '\xFF';
    EXPECT_EQ(ReadTiffOrientation(huge_count), 6);
  }
  for (const auto& [what, tiff] : bad_tiffs) {
    SCOPED_TRACE(what);
    EXPECT_EQ(ReadTiffOrientation(tiff), 1);
    const std::string file = WithExifSegment(jpeg, tiff);
    EXPECT_EQ(ReadExifOrientation(file), 1);
    auto decoded = DecodeImage(file, "bad_exif.jpg");
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->width, 16);
  }
  // An APP1 length running past the end of the file: no orientation (the decoder reports the damage).
  std::string overlong = WithExifSegment(jpeg, good);
  overlong[4] = '\x7F';
  EXPECT_EQ(ReadExifOrientation(overlong), 1);
  EXPECT_EQ(ReadExifOrientation(jpeg.substr(0, 5)), 1);
  EXPECT_EQ(ReadExifOrientation(std::string("\xFF\xD8\xFF\xE1\x00", 5)), 1);

  // Every truncation and many random corruptions of the TIFF block: never out of bounds, never outside 1..8
  // (run under BATON_SANITIZE=address to make "never out of bounds" a checked claim).
  for (size_t n = 0; n <= good.size(); ++n) {
    // The Orientation entry occupies bytes [22, 34): complete from 34 bytes on.
    EXPECT_EQ(ReadTiffOrientation(good.substr(0, n)), n >= 34 ? 6 : 1) << n;
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string t = Tiff(trial % 2 == 0, 3, 1, 1 + trial % 8);
    for (int k = 0; k < 3; ++k) t[rng() % t.size()] = static_cast<char>(rng());
    const int o = ReadTiffOrientation(t);
    ASSERT_GE(o, 1);
    ASSERT_LE(o, 8);
    if (trial % 50 == 0) {
      auto decoded = DecodeImage(WithExifSegment(jpeg, t), "fuzz.jpg");
      ASSERT_TRUE(decoded.ok()) << decoded.status();
    }
  }
}

}  // namespace
}  // namespace baton
