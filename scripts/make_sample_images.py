#!/usr/bin/env python3
"""Draws the bundled sample dataset (data/sample/): small PNG pictures of simple scenes with captions.

Deterministic, standard library only. The pictures are drawn, not photographed, so the repository ships no
third-party images; they are still real RGB images that go through the real decoder, buckets and VAE.
"""
import math
import os
import struct
import zlib

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "sample")

COLORS = {
    "red": (220, 40, 40), "blue": (40, 70, 210), "green": (40, 170, 70), "yellow": (240, 210, 40),
    "white": (245, 245, 245), "black": (20, 20, 20), "orange": (240, 140, 30), "purple": (130, 50, 170),
}


def png(path, w, h, pixel):
    rows = b"".join(b"\x00" + bytes(c for x in range(w) for c in pixel(x, y)) for y in range(h))
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


def scene(shape, fg, bg, w, h):
    cx, cy, r = w / 2, h / 2, min(w, h) * 0.3
    def inside(x, y):
        if shape == "circle":
            return (x - cx) ** 2 + (y - cy) ** 2 <= r * r
        if shape == "square":
            return abs(x - cx) <= r and abs(y - cy) <= r
        if shape == "triangle":
            return y >= cy - r and y <= cy + r and abs(x - cx) <= (y - (cy - r)) / 2
        if shape == "stripes":
            return int(x / (w / 8)) % 2 == 0
        return False
    def pixel(x, y):
        # A soft vertical gradient on the background keeps the images from being flat.
        t = y / h
        base = tuple(int(c * (0.85 + 0.15 * t)) for c in COLORS[bg])
        return COLORS[fg] if inside(x + 0.5, y + 0.5) else base
    return pixel


SAMPLES = [
    ("red_circle", "circle", "red", "blue", 128, 128, "a red circle on a blue background"),
    ("yellow_square", "square", "yellow", "green", 128, 128, "a yellow square on a green background"),
    ("white_triangle", "triangle", "white", "black", 128, 128, "a white triangle on a black background"),
    ("orange_circle", "circle", "orange", "purple", 128, 128, "an orange circle on a purple background"),
    ("blue_square", "square", "blue", "yellow", 128, 128, "a blue square on a yellow background"),
    ("green_triangle", "triangle", "green", "white", 128, 128, "a green triangle on a white background"),
    ("red_stripes_wide", "stripes", "red", "white", 160, 96, "red and white vertical stripes, wide"),
    ("purple_circle_wide", "circle", "purple", "orange", 160, 96, "a purple circle on an orange background, wide"),
]

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, shape, fg, bg, w, h, caption in SAMPLES:
        png(os.path.join(OUT, name + ".png"), w, h, scene(shape, fg, bg, w, h))
        with open(os.path.join(OUT, name + ".txt"), "w") as f:
            f.write(caption + "\n")
    print(f"wrote {len(SAMPLES)} images to {os.path.normpath(OUT)}")
