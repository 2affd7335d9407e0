"""Referee: Wan 2.1 I2V's CLIP image encoder (core/encode/clip_vision*, clip_image_processor) against transformers'
CLIPVisionModel and CLIPImageProcessor and diffusers' WanImageToVideoPipeline.encode_image.

1. Encoder: tiny random CLIPVisionModels (hidden 32, 3 layers, patch 4, image 16, non-trivial layer norms and attention)
   saved by save_pretrained (transformers 5: bare keys; sharded), in transformers 4.x's `vision_model.*` layout, and
   as a whole CLIPModel; quick_gelu and gelu. `baton clip-encode-image --inputs` must give hidden_states[-2] of the
   same pixel_values within 1e-4 relative (fp32); bf16 compute within 2e-2.
2. Preprocessing: generated photo-like images (gradients, shapes, texture, noise) of several sizes, as PNG and JPEG,
   through CLIPImageProcessor (the PIL backend: torchvision is not installed, so CLIPImageProcessor resolves to
   CLIPImageProcessorPil, as in this venv's diffusers) against `baton clip-encode-image --image`: pixel_values must be
   EQUAL (max abs diff 0), for Wan's preprocessor_config.json, laion's legacy one and other resamplers / sizes; the
   embeddings must match diffusers' encode_image (a batch of two images too) within 1e-4.
3. Baton's random writer (`--write-random`): CLIPVisionModel.from_pretrained loads it with no missing, unexpected or
   mis-shaped key, CLIPImageProcessor.from_pretrained its preprocessor_config.json, and the outputs agree.
"""

import json
import os
import types
import unittest

import numpy as np
import torch
from PIL import Image, ImageDraw
from safetensors.torch import load_file, save_file
from transformers import (CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTextConfig, CLIPVisionConfig,
                          CLIPVisionModel)
from transformers.utils import logging as hf_logging

import referee

TOLERANCE = 1e-4
BF16_TOLERANCE = 2e-2
hf_logging.set_verbosity_error()  # the torchvision -> PIL fallback warning

WAN_PROCESSOR = {  # Wan-AI/Wan2.1-I2V-14B-480P-Diffusers image_processor/preprocessor_config.json
    "crop_size": {"height": 224, "width": 224}, "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True,
    "do_rescale": True, "do_resize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "CLIPImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 224}}
LAION_PROCESSOR = {  # laion/CLIP-ViT-H-14-laion2B-s32B-b79K preprocessor_config.json (legacy feature extractor)
    "crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor", "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}


def tiny_config(hidden_act="gelu", image_size=16, patch_size=4):
    return CLIPVisionConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=3, num_attention_heads=4,
                            image_size=image_size, patch_size=patch_size, hidden_act=hidden_act, projection_dim=8,
                            layer_norm_eps=1e-5)


def randomize(model, seed):
    """Default init leaves q/k tiny (uniform attention) and norms at 1: draw weights that exercise every term."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or "layrnorm" in name:
                p.copy_(1.0 + 0.3 * torch.randn_like(p) if name.endswith("weight") else 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.2)
            elif "position_embedding" in name:
                p.normal_(0.0, 0.5)
            elif p.dim() >= 2:
                p.normal_(0.0, p[0].numel() ** -0.5)
            else:
                p.normal_(0.0, 1.0)
    return model.eval()


def tiny_model(hidden_act="gelu", seed=0, **kwargs):
    return randomize(CLIPVisionModel(tiny_config(hidden_act, **kwargs)), seed)


def penultimate(model, pixel_values):
    with torch.no_grad():
        return model(pixel_values=pixel_values, output_hidden_states=True).hidden_states[-2]


def photo_like(width, height, seed):
    """An RGB image with what photos have: smooth gradients, hard edges, texture and sensor noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = np.stack([120 + 100 * np.sin(x / (width / 3.1) + seed), 90 + 80 * np.cos(y / (height / 2.3)),
                     60 + 0.4 * (x + y) / (width + height) * 255], axis=-1)
    im = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(12):
        x0, y0 = rng.randint(0, width), rng.randint(0, height)
        x1, y1 = x0 + rng.randint(2, max(3, width // 3)), y0 + rng.randint(2, max(3, height // 3))
        color = tuple(int(c) for c in rng.randint(0, 256, 3))
        (draw.ellipse if rng.rand() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=color)
    a = np.asarray(im).astype(np.float64)
    a += 12 * np.sin(x / 1.7)[..., None] * np.cos(y / 2.3)[..., None] + rng.normal(0, 6, a.shape)
    return Image.fromarray(np.clip(np.round(a), 0, 255).astype(np.uint8))


class Case(unittest.TestCase):

    def setUp(self):
        self.tmp = referee.temp_dir()
        self.addCleanup(self.tmp.cleanup)

    def path(self, *parts):
        return os.path.join(self.tmp.name, *parts)

    def encode_inputs(self, model_dir, pixel_values, *extra):
        inputs, output = self.path("pixels.safetensors"), self.path("out.safetensors")
        save_file({"pixel_values": pixel_values.contiguous()}, inputs)
        referee.baton("clip-encode-image", "--model", model_dir, "--inputs", inputs, "--output", output, *extra)
        return load_file(output)["image_embeds"]

    def encode_images(self, model_dir, paths):
        output = self.path("out.safetensors")
        referee.baton("clip-encode-image", "--model", model_dir, "--image", ",".join(paths), "--output", output)
        return load_file(output)


class EncoderTest(Case):
    """hidden_states[-2] of given pixel_values."""

    def check(self, model, model_dir, name, batch=3, extra=(), tolerance=TOLERANCE, reference=None):
        torch.manual_seed(11)
        size = model.config.image_size
        pixels = torch.randn(batch, 3, size, size) * 1.5
        got = self.encode_inputs(model_dir, pixels, *extra)
        want = penultimate(reference or model, pixels)
        self.assertEqual(tuple(got.shape), (batch, (size // model.config.patch_size) ** 2 + 1, 32))
        err = referee.max_rel_error(got, want)
        print(f"CLIP vision {name}: hidden_states[-2] {tuple(got.shape)}, rel err {err:.2e}")
        self.assertLessEqual(err, tolerance, name)
        # The last layer must matter to hidden_states[-1], so the comparison above really is the penultimate one.
        with torch.no_grad():
            last = (reference or model)(pixel_values=pixels, output_hidden_states=True).hidden_states[-1]
        self.assertGreater(referee.max_rel_error(got, last), 0.05)

    def test_quick_gelu_pipeline_folder(self):
        model = tiny_model("quick_gelu", seed=1)
        model.save_pretrained(self.path("image_encoder"))
        CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}).save_pretrained(
            self.path("image_processor"))
        with open(self.path("image_encoder", "config.json")) as f:
            self.assertEqual(json.load(f)["hidden_act"], "quick_gelu")
        self.assertIn("embeddings.class_embedding", load_file(self.path("image_encoder", "model.safetensors")))
        self.check(model, self.tmp.name, "quick_gelu, transformers 5 layout, pipeline folder")

    def test_gelu_image_encoder_folder(self):
        model = tiny_model("gelu", seed=2)
        model.save_pretrained(self.path("image_encoder"))
        self.check(model, self.path("image_encoder"), "gelu, image_encoder/ folder")

    def test_transformers4_layout(self):
        """The published Wan checkpoints: `vision_model.*` keys (and a stale position_ids buffer)."""
        model = tiny_model("gelu", seed=3)
        os.makedirs(self.path("image_encoder"))
        state = {f"vision_model.{k}": v.contiguous() for k, v in model.state_dict().items()}
        state["vision_model.embeddings.position_ids"] = torch.arange(17).unsqueeze(0)
        save_file(state, self.path("image_encoder", "model.safetensors"), metadata={"format": "pt"})
        model.config.save_pretrained(self.path("image_encoder"))
        reloaded = CLIPVisionModel.from_pretrained(self.path("image_encoder")).eval()  # transformers reads it too
        self.check(model, self.tmp.name, "vision_model.* layout", reference=reloaded)

    def test_whole_clip_model(self):
        text = CLIPTextConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                              num_attention_heads=2, max_position_embeddings=8)
        clip = CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=tiny_config("quick_gelu").to_dict(),
                                    projection_dim=8))
        randomize(clip.vision_model, seed=4)
        clip.eval().save_pretrained(self.path("clip"))
        self.check(clip.vision_model, self.path("clip"), "CLIPModel folder (text tower ignored)")

    def test_sharded(self):
        model = tiny_model("gelu", seed=5)
        model.save_pretrained(self.path("image_encoder"), max_shard_size="20KB")
        self.assertTrue(os.path.exists(self.path("image_encoder", "model.safetensors.index.json")))
        self.check(model, self.tmp.name, "sharded", batch=1)

    def test_bf16_compute(self):
        model = tiny_model("gelu", seed=6)
        model.save_pretrained(self.path("image_encoder"))
        self.check(model.to(torch.bfloat16), self.tmp.name, "bf16 compute vs transformers bf16",
                   extra=("--dtype", "bf16"), tolerance=BF16_TOLERANCE)


class PreprocessTest(Case):
    """pixel_values from image files, and the embeddings diffusers' encode_image computes from them."""

    SIZES = [(832, 480), (480, 832), (1280, 720), (301, 300), (224, 224), (1000, 225), (100, 60), (57, 91)]

    def make_pipeline(self, processor_json, seed=7):
        model = tiny_model("gelu", seed=seed, image_size=224, patch_size=14)  # 257 tokens, as ViT-H/14 at 224
        model.save_pretrained(self.path("image_encoder"))
        os.makedirs(self.path("image_processor"), exist_ok=True)
        with open(self.path("image_processor", "preprocessor_config.json"), "w") as f:
            json.dump(processor_json, f)
        processor = CLIPImageProcessor.from_pretrained(self.path("image_processor"))
        return model, processor

    def write_images(self, fmt="png", sizes=None):
        paths = []
        for i, (w, h) in enumerate(sizes or self.SIZES):
            path = self.path(f"image{i}.{fmt}")
            photo_like(w, h, seed=i).save(path, quality=90) if fmt == "jpg" else photo_like(w, h, seed=i).save(path)
            paths.append(path)
        return paths

    def compare_pixels(self, processor, paths, name, embeds_model=None):
        worst = 0.0
        for path in paths:
            pil = Image.open(path).convert("RGB")
            got = self.encode_images(self.tmp.name, [path])
            want = processor(images=pil, return_tensors="pt").pixel_values
            self.assertEqual(tuple(got["pixel_values"].shape), tuple(want.shape), path)
            diff = (got["pixel_values"] - want).abs().max().item()
            worst = max(worst, diff)
            self.assertEqual(diff, 0.0, f"{name}: {os.path.basename(path)} {pil.size}: pixel_values differ by {diff}")
            if embeds_model is not None:
                pipe = types.SimpleNamespace(image_processor=processor, image_encoder=embeds_model)
                from diffusers import WanImageToVideoPipeline
                with torch.no_grad():
                    embeds = WanImageToVideoPipeline.encode_image(pipe, pil, device=torch.device("cpu"))
                self.assertEqual(tuple(got["image_embeds"].shape), (1, 257, 32))
                self.assertLessEqual(referee.max_rel_error(got["image_embeds"], embeds), TOLERANCE, path)
        print(f"{name}: {len(paths)} images, pixel_values max abs diff {worst}")

    def test_wan_processor_png(self):
        model, processor = self.make_pipeline(WAN_PROCESSOR)
        self.compare_pixels(processor, self.write_images("png"), "Wan processor, PNG", embeds_model=model)

    def test_wan_processor_jpeg(self):
        _, processor = self.make_pipeline(WAN_PROCESSOR)
        self.compare_pixels(processor, self.write_images("jpg"), "Wan processor, JPEG")

    def test_legacy_laion_processor(self):
        _, processor = self.make_pipeline(LAION_PROCESSOR)
        self.compare_pixels(processor, self.write_images("png", self.SIZES[:4]), "laion legacy processor")

    def test_batch_of_two_like_flf2v(self):
        model, processor = self.make_pipeline(WAN_PROCESSOR)
        paths = self.write_images("png", [(832, 480), (640, 640)])
        got = self.encode_images(self.tmp.name, paths)
        pils = [Image.open(p).convert("RGB") for p in paths]
        from diffusers import WanImageToVideoPipeline
        pipe = types.SimpleNamespace(image_processor=processor, image_encoder=model)
        with torch.no_grad():
            embeds = WanImageToVideoPipeline.encode_image(pipe, pils, device=torch.device("cpu"))
        self.assertEqual(tuple(got["image_embeds"].shape), (2, 257, 32))
        self.assertEqual((got["pixel_values"] - processor(images=pils, return_tensors="pt").pixel_values)
                         .abs().max().item(), 0.0)
        err = referee.max_rel_error(got["image_embeds"], embeds)
        print(f"encode_image([first, last]): rel err {err:.2e}")
        self.assertLessEqual(err, TOLERANCE)

    def test_other_resamplers_and_sizes(self):
        variants = [
            {"resample": 2, "size": {"shortest_edge": 200}},                 # bilinear, crop pads nothing
            {"resample": 1, "size": {"height": 240, "width": 300}},          # lanczos, squashed
            {"resample": 4, "size": {"shortest_edge": 190}, "crop_size": {"height": 224, "width": 224},
             "image_mean": 0.5, "image_std": 0.5},                           # box; crop larger: zero padding
            {"resample": 5, "size": {"shortest_edge": 224, "longest_edge": 300}},  # hamming, aspect limit
            {"do_resize": False, "do_rescale": False},                       # crop only, normalise raw values
        ]
        paths = self.write_images("png", [(832, 480), (301, 300), (100, 60), (57, 91)])
        for i, v in enumerate(variants):
            with self.subTest(variant=v):
                _, processor = self.make_pipeline({**WAN_PROCESSOR, **v})
                self.compare_pixels(processor, paths, f"variant {i} {v}")


class ResizeSweepTest(Case):
    """PIL's resampling itself, bit for bit: random source sizes (up- and downscaling, either pass order) squashed to
    16x16 by every filter, with rescale and normalisation off so pixel_values are the resized uint8 values."""

    def test_random_sizes_every_filter(self):
        tiny_model("gelu", seed=8).save_pretrained(self.path("image_encoder"))
        os.makedirs(self.path("image_processor"))
        rng = np.random.RandomState(5)
        sizes = [(int(rng.randint(2, 220)), int(rng.randint(2, 220))) for _ in range(36)]
        sizes += [(18, 200), (17, 16), (16, 90), (40, 16), (3, 2), (16, 16)]  # vertical-first, one axis, identity
        paths = self.write_images_of(sizes)
        vertical_first = sum(1 for w, h in sizes if h - 16 > 0 and h - 16 > 2 * (w - 16))
        for resample in (1, 2, 3, 4, 5):
            with self.subTest(resample=resample):
                with open(self.path("image_processor", "preprocessor_config.json"), "w") as f:
                    json.dump({"size": {"height": 16, "width": 16}, "crop_size": 16, "resample": resample,
                               "do_rescale": False, "do_normalize": False}, f)
                processor = CLIPImageProcessor.from_pretrained(self.path("image_processor"))
                got = self.encode_images(self.tmp.name, paths)["pixel_values"]
                pils = [Image.open(p).convert("RGB") for p in paths]
                want = processor(images=pils, return_tensors="pt").pixel_values
                direct = torch.stack([torch.from_numpy(np.array(im.resize((16, 16), resample))).permute(2, 0, 1)
                                      for im in pils]).float()
                self.assertTrue(torch.equal(want, direct))  # the processor is PIL's resize, nothing more
                bad = [(sizes[i], int((got[i] - want[i]).abs().max())) for i in range(len(sizes))
                       if not torch.equal(got[i], want[i])]
                self.assertFalse(bad, f"resample {resample}: (size, max level diff) {bad}")
                print(f"PIL resample {resample}: {len(sizes)} sizes ({vertical_first} vertical-first) equal")

    def write_images_of(self, sizes):
        paths = []
        for i, (w, h) in enumerate(sizes):
            paths.append(self.path(f"sweep{i}.png"))
            photo_like(w, h, seed=100 + i).save(paths[-1])
        return paths


class WriterTest(Case):
    """Baton's random CLIP folders as transformers reads them."""

    def check_writer(self, config_dict, seed):
        extra = []
        if config_dict is not None:
            with open(self.path("cfg.json"), "w") as f:
                json.dump(config_dict, f)
            extra = ["--random-config", self.path("cfg.json")]
        pipeline = self.path("pipeline")
        referee.baton("clip-encode-image", "--model", pipeline, "--write-random", seed, *extra)
        model, info = CLIPVisionModel.from_pretrained(os.path.join(pipeline, "image_encoder"),
                                                      output_loading_info=True)
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info[key], f"{key}: {info[key]}")
        processor = CLIPImageProcessor.from_pretrained(os.path.join(pipeline, "image_processor"))
        size = model.config.image_size
        self.assertEqual((processor.size.shortest_edge, processor.crop_size.height), (size, size))
        torch.manual_seed(3)
        pixels = torch.randn(2, 3, size, size)
        got = self.encode_inputs(pipeline, pixels)
        err = referee.max_rel_error(got, penultimate(model.eval(), pixels))
        print(f"random writer ({model.config.hidden_act}, {model.config.num_hidden_layers} layers): rel err {err:.2e}")
        self.assertLessEqual(err, TOLERANCE)
        return model

    def test_tiny(self):
        model = self.check_writer(None, 5)
        self.assertEqual(model.config.hidden_size, 32)

    def test_own_config(self):
        cfg = tiny_config("quick_gelu", image_size=28, patch_size=14).to_dict()
        cfg["num_hidden_layers"] = 2
        self.check_writer(cfg, 9)


if __name__ == "__main__":
    unittest.main()
