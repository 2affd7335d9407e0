#!/usr/bin/env python3
"""Draws the bundled Wan sample dataset (data/wan_sample/): three short clips of moving shapes with captions.

Each clip is 17 frames (4k+1, as Wan's VAE wants) of 64x64 at 16 fps (Wan's training rate), drawn here with the
standard library as PNG frames and turned into an MPEG-4 .mp4 by Baton's own writer (`baton write-video`, libavcodec),
so the files are real videos that go through the real decoder. Captions sit next to each clip as NAME.txt, the
layout of data/sample/. Deterministic. Needs a build: run after scripts/setup.sh (BATON_BIN_DIR overrides build/bin).
"""
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_sample_images import COLORS, png  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "data", "wan_sample")
BIN = os.environ.get("BATON_BIN_DIR", os.path.join(ROOT, "build", "bin"))
FRAMES, SIZE, FPS = 17, 64, 16


def frame(motion, shape, fg, bg, i):
    t = i / (FRAMES - 1)
    if motion == "right":  # left to right across the middle
        cx, cy = 12 + 40 * t, 32
    elif motion == "orbit":  # once around the centre
        cx, cy = 32 + 18 * math.cos(2 * math.pi * t), 32 + 18 * math.sin(2 * math.pi * t)
    else:  # "fall": top to bottom
        cx, cy = 32, 12 + 40 * t
    r = 9

    def inside(x, y):
        if shape == "circle":
            return (x - cx) ** 2 + (y - cy) ** 2 <= r * r
        if shape == "square":
            return abs(x - cx) <= r and abs(y - cy) <= r
        return cy - r <= y <= cy + r and abs(x - cx) <= (y - (cy - r)) / 2  # triangle

    def pixel(x, y):
        base = tuple(int(c * (0.85 + 0.15 * y / SIZE)) for c in COLORS[bg])
        return COLORS[fg] if inside(x + 0.5, y + 0.5) else base
    return pixel


CLIPS = [
    ("red_circle_right", "right", "circle", "red", "blue", "a red circle moving right on a blue background"),
    ("yellow_square_fall", "fall", "square", "yellow", "green", "a yellow square falling on a green background"),
    ("white_triangle_orbit", "orbit", "triangle", "white", "black",
     "a white triangle circling on a black background"),
]

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, motion, shape, fg, bg, caption in CLIPS:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(FRAMES):
                png(os.path.join(tmp, f"{i:03d}.png"), SIZE, SIZE, frame(motion, shape, fg, bg, i))
            subprocess.run([os.path.join(BIN, "baton"), "write-video", "--frames", tmp, "--output",
                            os.path.join(OUT, name + ".mp4"), "--fps", str(FPS)], check=True)
        with open(os.path.join(OUT, name + ".txt"), "w") as f:
            f.write(caption + "\n")
    print(f"wrote {len(CLIPS)} clips to {os.path.normpath(OUT)}")
