// EXIF orientation: tag 0x0112 of IFD0, read from a JPEG's APP1 "Exif\0\0" segment or a PNG's eXIf
// chunk, and applied to decoded pixels the way diffusers' trainers do it (`PIL.ImageOps.exif_transpose`).
// The readers see untrusted bytes: every offset is bounds-checked, and anything malformed (truncated
// segment, bad TIFF header, IFD outside the data, wrong tag type, value outside 1..8) reads as 1, "as
// stored", so a damaged EXIF block never stops a decode. XMP `tiff:Orientation` (a PIL fallback) is not read.
#pragma once

#include <absl/strings/string_view.h>

#include "core/image/image.h"

namespace baton {

// 1..8 from a TIFF structure ("II*\0" or "MM\0*" header, IFD0); 1 when absent or malformed. A leading
// "Exif\0\0" is skipped (PIL accepts it in PNG eXIf chunks too).
int ReadTiffOrientation(absl::string_view tiff);

// 1..8 from a whole JPEG (first APP1 Exif segment before the scan) or PNG (eXIf chunk) file; 1 for other
// formats, no EXIF, or malformed EXIF.
int ReadExifOrientation(absl::string_view image_bytes);

// True for the orientations that swap width and height (5..8).
inline bool OrientationSwapsAxes(int orientation) { return orientation >= 5 && orientation <= 8; }

// The image as it should be displayed: PIL's transpose for `orientation` (2 FLIP_LEFT_RIGHT, 3 ROTATE_180,
// 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90); any other value is a copy.
Image ApplyExifOrientation(const Image& image, int orientation);

}  // namespace baton
