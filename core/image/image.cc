// PNG and JPEG codecs. libpng and libjpeg report fatal errors through a callback that must not
// return; here it records the message and longjmps back to the setjmp in a *Raw function. Those
// functions keep no C++ objects with destructors in their own frame (longjmp would skip them):
// inputs, outputs and the error text live in the caller.
#include "core/image/image.h"

#include <absl/strings/str_cat.h>
#include <png.h>

// clang-format off
#include <jpeglib.h>  // before jerror.h
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/image/exif.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

absl::Status CheckSize(int64_t width, int64_t height, absl::string_view name) {
  if (width <= 0 || height <= 0 || width > kMaxImageSide || height > kMaxImageSide ||
      width * height > kMaxImagePixels) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": image size ", width, "x", height,
                                                   " is empty or over the limit (", kMaxImageSide, " per side, ",
                                                   kMaxImagePixels, " pixels)"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// PNG

struct PngIo {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  std::string* output = nullptr;  // encode only
  std::string error;
};

void PngOnError(png_structp png, png_const_charp message) {
  static_cast<PngIo*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}
void PngOnWarning(png_structp, png_const_charp) {}

void PngReadBytes(png_structp png, png_bytep out, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (io->size - io->pos < n) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

void PngWriteBytes(png_structp png, png_bytep data, png_size_t n) {
  static_cast<PngIo*>(png_get_io_ptr(png))->output->append(reinterpret_cast<char*>(data), n);
}
void PngFlush(png_structp) {}

bool DecodePngRaw(PngIo* io, Image* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, io, PngOnError, PngOnWarning);
  if (png == nullptr) {
    io->error = "cannot allocate libpng reader";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_set_read_fn(png, io, PngReadBytes);
  png_read_info(png, info);
  png_uint_32 width = png_get_image_width(png, info);
  png_uint_32 height = png_get_image_height(png, info);
  if (static_cast<int64_t>(width) * height > kMaxImagePixels) png_error(png, "image too large");
  int color_type = png_get_color_type(png, info);
  int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  // Alpha is dropped as PIL's convert("RGB") drops it, whether stored or made by expanding a palette's tRNS chunk.
  if ((color_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != width * 3) {
    png_error(png, "unexpected pixel layout after conversion to RGB8");
  }
  out->width = static_cast<int>(width);
  out->height = static_cast<int>(height);
  out->pixels.assign(static_cast<size_t>(width) * height * 3, 0);
  for (int pass = 0; pass < passes; ++pass) {
    for (png_uint_32 y = 0; y < height; ++y) {
      png_read_row(png, out->pixels.data() + static_cast<size_t>(y) * width * 3, nullptr);
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

bool EncodePngRaw(PngIo* io, const Image& image) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, io, PngOnError, PngOnWarning);
  if (png == nullptr) {
    io->error = "cannot allocate libpng writer";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, io, PngWriteBytes, PngFlush);
  png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < image.height; ++y) {
    png_write_row(png, image.pixels.data() + static_cast<size_t>(y) * image.width * 3);
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// ---------------------------------------------------------------------------------------------
// JPEG

struct JpegError {
  jpeg_error_mgr mgr;  // first member: libjpeg passes &mgr, we cast back
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool damaged;  // a warning other than "extraneous bytes" was emitted
};

void JpegOnErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// libjpeg only warns on truncated or damaged entropy data and fills the rest with gray; PIL
// refuses such files, and so do we. Extraneous bytes before a marker are harmless.
void JpegOnMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  if (cinfo->err->msg_code == JWRN_EXTRANEOUS_DATA || err->damaged) return;
  (*cinfo->err->format_message)(cinfo, err->message);
  err->damaged = true;
}

JpegError* InitJpegError(JpegError* err) {
  jpeg_std_error(&err->mgr);
  err->mgr.error_exit = JpegOnErrorExit;
  err->mgr.emit_message = JpegOnMessage;
  err->message[0] = '\0';
  err->damaged = false;
  return err;
}

// header_only: fill width/height without allocating or decoding pixels.
bool DecodeJpegRaw(const uint8_t* data, size_t size, bool header_only, JpegError* err, Image* out) {
  jpeg_decompress_struct cinfo;
  cinfo.err = &err->mgr;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  out->width = static_cast<int>(cinfo.image_width);
  out->height = static_cast<int>(cinfo.image_height);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(err->message, sizeof(err->message), "CMYK/YCCK JPEG is not supported; convert the image to RGB");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (header_only) {
    jpeg_destroy_decompress(&cinfo);
    return !err->damaged;
  }
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > kMaxImagePixels ||
      cinfo.image_width > kMaxImageSide || cinfo.image_height > kMaxImageSide) {
    std::snprintf(err->message, sizeof(err->message), "image too large (%ux%u)", cinfo.image_width, cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3) {
    std::snprintf(err->message, sizeof(err->message), "cannot convert to RGB (%d components)", cinfo.output_components);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  out->width = static_cast<int>(cinfo.output_width);
  out->height = static_cast<int>(cinfo.output_height);
  out->pixels.assign(static_cast<size_t>(out->width) * out->height * 3, 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.data() + static_cast<size_t>(cinfo.output_scanline) * out->width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return !err->damaged;
}

bool EncodeJpegRaw(const Image& image, int quality, JpegError* err, unsigned char** buffer, unsigned long* size) {
  jpeg_compress_struct cinfo;
  cinfo.err = &err->mgr;
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buffer, size);
  cinfo.image_width = image.width;
  cinfo.image_height = image.height;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(image.pixels.data()) + static_cast<size_t>(cinfo.next_scanline) * image.width * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

absl::Status CheckDecodable(ImageFormat format, absl::string_view bytes, absl::string_view name) {
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": zero-byte file"));
  switch (format) {
    case ImageFormat::kPng:
    case ImageFormat::kJpeg:
      return absl::OkStatus();
    case ImageFormat::kUnknown:
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a recognized image (no PNG or JPEG signature)"));
    default:
      return absl::UnimplementedError(absl::StrCat(name, ": ", ImageFormatName(format),
                                                   " is not supported by this build (PNG and "
                                                   "JPEG are)"));
  }
}

absl::Status CheckImageValid(const Image& image, absl::string_view name) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": image ", image.width, "x", image.height, " with ",
                                                   image.pixels.size(), " bytes is not a valid RGB8 image"));
  }
  return CheckSize(image.width, image.height, name);
}

}  // namespace

ImageFormat DetectImageFormat(absl::string_view b) {
  auto starts = [&](absl::string_view magic, size_t at = 0) {
    return b.size() >= at + magic.size() && b.substr(at, magic.size()) == magic;
  };
  if (starts(absl::string_view(reinterpret_cast<const char*>(kPngMagic), 8))) {
    return ImageFormat::kPng;
  }
  if (starts("\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (starts("RIFF") && starts("WEBP", 8)) return ImageFormat::kWebp;
  if (starts("GIF87a") || starts("GIF89a")) return ImageFormat::kGif;
  if (starts("BM")) return ImageFormat::kBmp;
  if (starts(absl::string_view("II*\0", 4)) || starts(absl::string_view("MM\0*", 4))) {
    return ImageFormat::kTiff;
  }
  return ImageFormat::kUnknown;
}

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kTiff:
      return "TIFF";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

absl::StatusOr<ImageInfo> ReadImageInfo(absl::string_view bytes, absl::string_view name) {
  ImageInfo info;
  info.format = DetectImageFormat(bytes);
  RETURN_IF_ERROR(CheckDecodable(info.format, bytes, name));
  if (info.format == ImageFormat::kPng) {
    // Signature (8), IHDR length (4), "IHDR" (4), width (4, big-endian), height (4).
    if (bytes.size() < 24 || bytes.substr(12, 4) != "IHDR") {
      return absl::InvalidArgumentError(absl::StrCat(name, ": truncated PNG header"));
    }
    auto be32 = [&](size_t at) {
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + at);
      return (int64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    };
    RETURN_IF_ERROR(CheckSize(be32(16), be32(20), name));
    info.width = static_cast<int>(be32(16));
    info.height = static_cast<int>(be32(20));
  } else {
    JpegError err;
    Image header;
    if (!DecodeJpegRaw(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                       /*header_only=*/true, InitJpegError(&err), &header)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad JPEG: ", err.message));
    }
    RETURN_IF_ERROR(CheckSize(header.width, header.height, name));
    info.width = header.width;
    info.height = header.height;
  }
  info.orientation = ReadExifOrientation(bytes);
  if (OrientationSwapsAxes(info.orientation)) std::swap(info.width, info.height);
  return info;
}

absl::StatusOr<Image> DecodeImage(absl::string_view bytes, absl::string_view name, ExifOrientationMode orientation) {
  ImageFormat format = DetectImageFormat(bytes);
  RETURN_IF_ERROR(CheckDecodable(format, bytes, name));
  Image image;
  if (format == ImageFormat::kPng) {
    PngIo io;
    io.data = reinterpret_cast<const uint8_t*>(bytes.data());
    io.size = bytes.size();
    if (!DecodePngRaw(&io, &image)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad PNG: ", io.error));
    }
  } else {
    JpegError err;
    if (!DecodeJpegRaw(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                       /*header_only=*/false, InitJpegError(&err), &image)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad JPEG: ", err.message));
    }
  }
  RETURN_IF_ERROR(CheckImageValid(image, name));
  if (orientation == ExifOrientationMode::kApply) {
    const int exif_orientation = ReadExifOrientation(bytes);
    if (exif_orientation != 1) image = ApplyExifOrientation(image, exif_orientation);
  }
  return image;
}

absl::StatusOr<Image> ReadImageFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeImage(bytes, path);
}

absl::StatusOr<std::string> EncodePng(const Image& image) {
  RETURN_IF_ERROR(CheckImageValid(image, "EncodePng"));
  std::string out;
  PngIo io;
  io.output = &out;
  if (!EncodePngRaw(&io, image)) {
    return absl::InternalError(absl::StrCat("PNG encoding failed: ", io.error));
  }
  return out;
}

absl::Status WritePng(const std::string& path, const Image& image) {
  auto png = EncodePng(image);
  if (!png.ok()) return Annotate(png.status(), path);
  return WriteFileAtomic(path, *png);
}

absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality) {
  RETURN_IF_ERROR(CheckImageValid(image, "EncodeJpeg"));
  if (quality < 1 || quality > 100) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG quality ", quality, " not in [1, 100]"));
  }
  JpegError err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  bool ok = EncodeJpegRaw(image, quality, InitJpegError(&err), &buffer, &size);
  std::string out;
  if (ok) out.assign(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  if (!ok) return absl::InternalError(absl::StrCat("JPEG encoding failed: ", err.message));
  return out;
}

}  // namespace baton
