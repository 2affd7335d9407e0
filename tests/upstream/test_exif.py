"""Referee: EXIF orientation, as diffusers' trainers apply it (`PIL.ImageOps.exif_transpose` on load).

Pillow writes JPEG and PNG files with orientations 1-8 (EXIF in both byte orders). Baton decodes each with
`baton decode-image` twice: as training does (orientation applied) and with --ignore-orientation. Checks:
  1. Baton's oriented image == Pillow's own `Image.transpose` for that orientation applied to Baton's stored
     pixels: exact, so the orientation logic is held to Pillow with no codec noise in between.
  2. Baton's oriented image vs `exif_transpose(Image.open(f)).convert("RGB")`: same size, and pixels within
     the JPEG-decoder tolerance measured below (PNG: exact).
  3. A file whose EXIF is damaged still decodes, as stored.
"""

import os
import unittest

import numpy as np
from PIL import Image, ImageOps

from referee import baton, temp_dir

TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def picture(w=48, h=32):
    """A picture no flip or rotation maps onto itself: a gradient plus an off-centre block."""
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 255 // (w - 1), y * 255 // (h - 1), (x * 3 + y * 5) % 256], axis=-1).astype(np.uint8)
    rgb[2:10, 4:20] = (250, 20, 20)
    return Image.fromarray(rgb, "RGB")


def exif_bytes(orientation, endian):
    exif = Image.Exif()
    exif.endian = endian
    exif[0x0112] = orientation
    exif[0x010F] = "BatonCam"  # a second IFD0 entry, so the orientation is not the only one
    return exif.tobytes()


class ExifOrientationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = temp_dir()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def decode(self, path, *flags):
        out = path + ("-raw" if flags else "-oriented") + ".png"
        baton("decode-image", "--input", path, "--output", out, *flags)
        with Image.open(out) as im:
            return np.asarray(im.convert("RGB"))

    def check_file(self, path, orientation, max_level_diff):
        oriented = self.decode(path)
        stored = self.decode(path, "--ignore-orientation")
        # 1. Exact against Pillow's transpose of the same stored pixels.
        expected = Image.fromarray(stored)
        if orientation in TRANSPOSE:
            expected = expected.transpose(TRANSPOSE[orientation])
        np.testing.assert_array_equal(oriented, np.asarray(expected))
        # 2. Against the whole Pillow path diffusers' trainers use.
        with Image.open(path) as im:
            reference = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        self.assertEqual(oriented.shape, reference.shape)
        diff = np.abs(oriented.astype(int) - reference.astype(int)).max()
        self.assertLessEqual(diff, max_level_diff)
        return diff

    def test_jpeg_all_orientations_both_byte_orders(self):
        diffs = []
        for endian in ("<", ">"):
            for orientation in range(1, 9):
                with self.subTest(endian=endian, orientation=orientation):
                    path = os.path.join(self.tmp.name, f"o{orientation}{'le' if endian == '<' else 'be'}.jpg")
                    picture().save(path, "JPEG", quality=92, exif=exif_bytes(orientation, endian))
                    # Pillow's bundled libjpeg-turbo and the system one run the same default IDCT (islow) and
                    # fancy upsampling; measured 0 here. 2 levels allows a different libjpeg-turbo release's
                    # rounding without hiding an orientation error (a wrong transpose moves the red block and
                    # differs by >100 levels).
                    diffs.append(self.check_file(path, orientation, max_level_diff=2))
        print(f"JPEG: max |Baton - Pillow| over 16 files = {max(diffs)} levels")

    def test_png_exif_chunk(self):
        for orientation in (1, 3, 6, 8):
            with self.subTest(orientation=orientation):
                path = os.path.join(self.tmp.name, f"o{orientation}.png")
                picture().save(path, "PNG", exif=exif_bytes(orientation, "<"))
                self.check_file(path, orientation, max_level_diff=0)  # lossless

    def test_damaged_exif_decodes_as_stored(self):
        good = exif_bytes(6, "<")  # b"Exif\0\0" + TIFF header (8 bytes) + IFD0
        clean = os.path.join(self.tmp.name, "clean.jpg")
        picture().save(clean, "JPEG", quality=92)
        stored = self.decode(clean)
        for name, exif in [("truncated IFD", good[:20]),
                           ("IFD offset past the end", good[:10] + b"\xff\xff\xff\x7f" + good[14:]),
                           ("not TIFF", good[:6] + b"XX" + good[8:]),
                           ("orientation 9", exif_bytes(9, ">"))]:
            with self.subTest(name=name):
                path = os.path.join(self.tmp.name, name.replace(" ", "_") + ".jpg")
                picture().save(path, "JPEG", quality=92, exif=exif)
                # The entropy-coded data is the same as clean.jpg's: so must the decoded pixels be.
                np.testing.assert_array_equal(self.decode(path), stored)


if __name__ == "__main__":
    unittest.main()
