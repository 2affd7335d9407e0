#include "core/image/exif.h"

#include <cstdint>
#include <cstring>

namespace baton {
namespace {

constexpr uint16_t kOrientationTag = 0x0112;
constexpr uint16_t kTypeShort = 3;
constexpr uint16_t kTypeLong = 4;

// Reads integers of a TIFF block in its byte order; every read is bounds-checked by the caller.
struct TiffReader {
  const uint8_t* data;
  size_t size;
  bool little_endian;

  uint16_t U16(size_t at) const {
    return little_endian ? static_cast<uint16_t>(data[at] | (data[at + 1] << 8))
                         : static_cast<uint16_t>((data[at] << 8) | data[at + 1]);
  }
  uint32_t U32(size_t at) const {
    uint32_t a = data[at], b = data[at + 1], c = data[at + 2], d = data[at + 3];
    return little_endian ? (a | (b << 8) | (c << 16) | (d << 24)) : ((a << 24) | (b << 16) | (c << 8) | d);
  }
};

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

int OrientationFromJpeg(const uint8_t* p, size_t n) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= n) {
    if (p[pos] != 0xFF) return 1;  // not at a marker: damaged header, let the decoder judge
    uint8_t marker = p[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;              // SOS / EOI: no APP1 in the header
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // TEM, RSTn: no length
      pos += 2;
      continue;
    }
    size_t length = (size_t{p[pos + 2]} << 8) | p[pos + 3];  // includes its own two bytes
    if (length < 2 || length > n - pos - 2) return 1;
    const uint8_t* payload = p + pos + 4;
    size_t payload_size = length - 2;
    if (marker == 0xE1 && payload_size >= 6 && std::memcmp(payload, "Exif\0\0", 6) == 0) {
      return ReadTiffOrientation(absl::string_view(reinterpret_cast<const char*>(payload), payload_size));
    }
    pos += 2 + length;
  }
  return 1;
}

int OrientationFromPng(const uint8_t* p, size_t n) {
  size_t pos = 8;  // after the signature
  while (pos + 12 <= n) {
    uint32_t length = Be32(p + pos);
    if (length > n - pos - 12) return 1;
    const uint8_t* type = p + pos + 4;
    if (std::memcmp(type, "eXIf", 4) == 0) {
      return ReadTiffOrientation(absl::string_view(reinterpret_cast<const char*>(p + pos + 8), length));
    }
    if (std::memcmp(type, "IEND", 4) == 0) return 1;
    pos += size_t{length} + 12;
  }
  return 1;
}

}  // namespace

int ReadTiffOrientation(absl::string_view tiff) {
  if (tiff.size() >= 6 && std::memcmp(tiff.data(), "Exif\0\0", 6) == 0) tiff.remove_prefix(6);
  const auto* p = reinterpret_cast<const uint8_t*>(tiff.data());
  const size_t n = tiff.size();
  if (n < 8) return 1;
  TiffReader r{p, n, false};
  if (p[0] == 'I' && p[1] == 'I') {
    r.little_endian = true;
  } else if (!(p[0] == 'M' && p[1] == 'M')) {
    return 1;
  }
  if (r.U16(2) != 42) return 1;
  const size_t ifd = r.U32(4);
  if (ifd > n - 2) return 1;
  const size_t entries = r.U16(ifd);
  int orientation = 1;
  // PIL keeps the last entry of a repeated tag; so do we. Entries past the end of the data are ignored.
  for (size_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (e > n - 12) break;
    if (r.U16(e) != kOrientationTag) continue;
    const uint16_t type = r.U16(e + 2);
    const uint32_t count = r.U32(e + 4);
    uint32_t value = 0;  // count != 1: PIL reads a tuple, which matches no orientation
    if (count == 1 && type == kTypeShort) value = r.U16(e + 8);
    if (count == 1 && type == kTypeLong) value = r.U32(e + 8);
    orientation = (value >= 1 && value <= 8) ? static_cast<int>(value) : 1;
  }
  return orientation;
}

int ReadExifOrientation(absl::string_view image_bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(image_bytes.data());
  switch (DetectImageFormat(image_bytes)) {
    case ImageFormat::kJpeg:
      return OrientationFromJpeg(p, image_bytes.size());
    case ImageFormat::kPng:
      return OrientationFromPng(p, image_bytes.size());
    default:
      return 1;
  }
}

Image ApplyExifOrientation(const Image& image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int w = image.width, h = image.height;
  Image out = OrientationSwapsAxes(orientation) ? Image(h, w) : Image(w, h);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // the source pixel shown at (x, y)
      switch (orientation) {
        case 2:  // FLIP_LEFT_RIGHT
          sx = w - 1 - x;
          break;
        case 3:  // ROTATE_180
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;
        case 4:  // FLIP_TOP_BOTTOM
          sy = h - 1 - y;
          break;
        case 5:  // TRANSPOSE
          sx = y;
          sy = x;
          break;
        case 6:  // ROTATE_270 (90° clockwise)
          sx = y;
          sy = h - 1 - x;
          break;
        case 7:  // TRANSVERSE
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;
        case 8:  // ROTATE_90 (90° counter-clockwise)
          sx = w - 1 - y;
          sy = x;
          break;
      }
      std::memcpy(out.at(x, y), image.at(sx, sy), 3);
    }
  }
  return out;
}

}  // namespace baton
