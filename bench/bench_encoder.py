"""The encoder worker's per-sample work in Baton against transformers + diffusers on the same torch.

One command times, per pipeline config and thread count, the three things the encoder worker spends its time on,
in Baton (build/bin/bench_encoder: Flux2SampleEncoder in-process, no RPC) and in PyTorch (the classes the
referees in tests/upstream/ compare against), on the same weights, captions and image; the LAST line is a JSON
object.

    .venv/bin/python bench/bench_encoder.py --bin build/bin/bench_encoder

  caption  seconds per caption: tokenize (chat template, truncate/pad to --max_sequence_length) + text encoder
           -> prompt_embeds [L, 3 x hidden]. PyTorch: Flux2Pipeline._get_mistral_3_small_prompt_embeds (what
           Flux2Pipeline.encode_prompt runs) with Mistral3ForConditionalGeneration and the folder's
           PreTrainedTokenizerFast.
  image    seconds per image: read + decode the JPEG, resize to cover the bucket + center crop, VAE encode
           (posterior mean), patchify, BatchNorm-normalise, pack -> [tokens, 128]. PyTorch: PIL decode and
           resize (BILINEAR, antialiased when shrinking, as diffusers' trainers), AutoencoderKLFlux2 via
           Flux2Pipeline._encode_vae_image + _pack_latents.
  tokens   text-encoder tokens/s: --tokens random ids, no padding, hidden states of layers 10/20/30. PyTorch: the
           Mistral3 language model cut after layer 30 (final norm off), i.e. the same work as Baton, which never
           runs the layers after the deepest one it returns; the full model (40 layers + lm_head, what the
           pipeline runs) is in the caption figure.

Configs (all written by the binary with Baton's own random-weight writers, loaded by transformers/diffusers):
  tiny    `baton init-weights --pipeline tiny`: Mistral-3 text encoder hidden 32 x 40 layers, VAE
          {16,32,32,32} x 1 resnet; image 256x256.
  scaled  text encoder hidden 256 (8 heads x 64, 2 kv heads, SwiGLU 1024) x 40 layers, VAE {64,128,256,256}
          x 2 resnets, 32 groups (FLUX.2's at half width); image 512x512.
  real    Mistral-Small-3.1-24B's real layer shapes (hidden 5120, 32 heads x 128, 8 kv heads, SwiGLU 32768, 1.09 GB
          of bf16 per layer), --text_layers of them (+1 unused, so the last one read is not the final-norm entry);
          hidden states of the last 3 layers read stand in for 10/20/30. Text only (no image metric); the caption
          metric is the chat-templated, left-padded prompt through the same cut model on both sides (the
          pipeline's own function reads layers 10/20/30); LONG_CAPTIONS, ~100-300 real tokens.
--dtype auto computes tiny and scaled in fp32 (as the encoder worker does) and real in bf16 (as users run
Mistral-3 on a CPU), on both sides.
Before timing it checks both sides agree: token ids equal, prompt embeddings and tokens output within --check_tol
relative, the cropped pixels within 1/255 on average (PIL's
antialiased bilinear vs Baton's area averaging: not the same filter), and diffusers' packed latents of Baton's
pixels within --check_tol of Baton's. Then 1 warm-up call per metric and side and --rounds rounds per side
(alternating which side goes first) of --reps calls per metric; figures are medians over all timed calls.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

CONFIGS = {"tiny": 256, "scaled": 512, "real": 256}  # config -> square bucket side
LAYERS = (10, 20, 30)  # FLUX.2-dev's hidden_states_layers
CAPTIONS = [
    "A photo of a red apple on a wooden table, soft morning light from the left.",
    "a watercolor painting of a lighthouse on a rocky coast during a storm, waves crashing",
    "Close-up portrait of an old fisherman with a grey beard, wearing a yellow raincoat.",
    "isometric 3d render of a tiny cozy bedroom with plants, books and a cat sleeping on the bed",
    "Street at night in Tokyo, neon signs reflected in puddles, people with umbrellas, cinematic.",
    "A bowl of ramen with an egg, green onions and pork, steam rising, top-down view",
]
LONG_CAPTIONS = [  # the real config's: ~100, ~200 and ~300 real tokens with the tiny byte-level tokenizer
    "A photo of a red apple on a wooden table, soft morning light from the left, a linen napkin folded beside it.",
    "A watercolor painting of a lighthouse on a rocky coast during a storm, waves crashing against the rocks, "
    "gulls circling in the grey sky, a small fishing boat heading for the harbour, its lamp glowing warm amber, "
    "rain streaking across the paper in loose diagonal washes.",
    "Street at night in Tokyo, neon signs in pink, blue and green reflected in wide puddles, people with clear "
    "umbrellas waiting at a crossing, a yellow taxi turning the corner with its wipers up, steam rising from a "
    "ramen stall where a cook in a white apron ladles broth, a cat watching from a doorway, overhead power lines "
    "cutting the glow, shot on a 35 mm lens at f/1.8, shallow depth of field, cinematic colour grading, fine grain.",
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "bench_encoder"))
    p.add_argument("--configs", default="tiny,scaled")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--max_sequence_length", type=int, default=512)
    p.add_argument("--tokens", type=int, default=512, help="sequence length of the tokens/s measurement")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--reps", type=int, default=2, help="timed calls per metric per side per round")
    p.add_argument("--check_tol", type=float, default=1e-3, help="fp32 agreement bound (bf16: x30)")
    p.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16"], help="both sides' compute dtype")
    p.add_argument("--text_layers", type=int, default=4, help="real config: text encoder layers timed (>= 3)")
    return p.parse_args()


def write_image(path, width, height):
    """A smooth colour field with noise and edges (so JPEG and the resampler have real work), as a JPEG."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    rng = np.random.default_rng(0)
    rgb = np.stack([128 + 100 * np.sin(x / 37.0), 128 + 100 * np.cos(y / 23.0), 128 + 90 * np.sin((x + y) / 51.0)], -1)
    rgb += rng.normal(0, 12, rgb.shape)
    rgb[(x // 64 + y // 64) % 5 == 0] *= 0.5
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(path, quality=90)


def write_problem(args, binary, config, out_dir):
    pipe_dir = os.path.join(out_dir, config)
    subprocess.run([binary, "--write", pipe_dir, "--config", config, "--seed", "0", "--text_layers",
                    str(args.text_layers + 1)], check=True)
    side = CONFIGS[config]
    image = os.path.join(out_dir, f"{config}.jpg")
    write_image(image, side * 3 // 2 + 8, side * 5 // 4)  # wider than tall: cover-resize crops the sides
    captions = os.path.join(out_dir, "captions.txt")
    real = config == "real"
    with open(captions, "w") as f:
        f.write("\n".join(LONG_CAPTIONS if real else CAPTIONS) + "\n")
    vocab = json.load(open(os.path.join(pipe_dir, "text_encoder", "config.json")))["text_config"]["vocab_size"]
    ids = os.path.join(out_dir, f"{config}_ids.safetensors")
    save_file({"input_ids": torch.randint(0, vocab, (1, args.tokens), generator=torch.Generator().manual_seed(1))}, ids)
    n = args.text_layers
    return {"pipe": pipe_dir, "image": image, "captions": captions, "ids": ids, "side": side, "real": real,
            "layers": (n - 2, n - 1, n) if real else LAYERS,
            "dtype": {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_of(args, config)]}


def dtype_of(args, config):
    return ("bf16" if config == "real" else "fp32") if args.dtype == "auto" else args.dtype


class PyTorchSide:
    """transformers' Mistral3ForConditionalGeneration + PreTrainedTokenizerFast, diffusers' AutoencoderKLFlux2."""

    def __init__(self, args, problem):
        from diffusers import AutoencoderKLFlux2, Flux2Pipeline
        from transformers import Mistral3ForConditionalGeneration, PreTrainedTokenizerFast

        self.pipeline_cls, self.args, self.problem = Flux2Pipeline, args, problem
        pipe = problem["pipe"]
        self.text_encoder = Mistral3ForConditionalGeneration.from_pretrained(os.path.join(pipe, "text_encoder"),
                                                                             dtype=problem["dtype"]).eval()
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.join(pipe, "tokenizer"))
        self.vae = AutoencoderKLFlux2.from_pretrained(os.path.join(pipe, "vae")).eval()
        self.vae_pipe = types.SimpleNamespace(vae=self.vae, _patchify_latents=Flux2Pipeline._patchify_latents)
        # The language model through layer 30 only, final norm off: hidden_states[30] stays layer 30's output.
        self.cut = self.text_encoder.model.language_model
        self.layers = problem["layers"]
        self.cut_layers = self.cut.layers[:max(self.layers)]
        self.captions = LONG_CAPTIONS if problem["real"] else CAPTIONS
        self.next_caption = 0
        self.ids = load_file(problem["ids"])["input_ids"]

    def encode_caption(self, caption):
        if self.problem["real"]:
            ids = self.caption_ids(caption)
            return self.encode_cut(ids, (ids != self.tokenizer.pad_token_id).long())
        return self.pipeline_cls._get_mistral_3_small_prompt_embeds(
            self.text_encoder, self.tokenizer, caption, max_sequence_length=self.args.max_sequence_length)

    def caption_ids(self, caption):
        from diffusers.pipelines.flux2.pipeline_flux2 import format_input
        out = self.tokenizer.apply_chat_template(format_input([caption]), add_generation_prompt=False, tokenize=True,
                                                 return_dict=True, return_tensors="pt", padding="max_length",
                                                 truncation=True, max_length=self.args.max_sequence_length)
        return out["input_ids"]

    def load_pixels(self):
        side = self.problem["side"]
        with open(self.problem["image"], "rb") as f:
            img = Image.open(io.BytesIO(f.read())).convert("RGB")
        scale = max(side / img.width, side / img.height)
        w, h = max(side, round(img.width * scale)), max(side, round(img.height * scale))
        img = img.resize((w, h), Image.BILINEAR)  # what diffusers' trainers use (torchvision Resize, antialiased)
        left, top = (w - side) // 2, (h - side) // 2
        img = img.crop((left, top, left + side, top + side))
        return torch.from_numpy(np.array(img)).permute(2, 0, 1)[None].float() / 127.5 - 1.0

    def encode_pixels(self, pixels):
        latents = self.pipeline_cls._encode_vae_image(self.vae_pipe, pixels, generator=None)
        return self.pipeline_cls._pack_latents(latents)

    def encode_tokens(self):
        return self.encode_cut(self.ids, torch.ones_like(self.ids))

    def encode_cut(self, ids, mask):
        full_layers, full_norm = self.cut.layers, self.cut.norm
        self.cut.layers, self.cut.norm = self.cut_layers, torch.nn.Identity()
        try:
            out = self.cut(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        finally:
            self.cut.layers, self.cut.norm = full_layers, full_norm
        return torch.cat([out.hidden_states[k] for k in self.layers], dim=-1)

    def run(self, what, n):
        seconds = []
        with torch.no_grad():
            for _ in range(n):
                t0 = time.perf_counter()
                if what == "caption":
                    self.encode_caption(self.captions[self.next_caption % len(self.captions)])
                    self.next_caption += 1
                elif what == "image":
                    self.encode_pixels(self.load_pixels())
                else:
                    self.encode_tokens()
                seconds.append(time.perf_counter() - t0)
        return seconds


class BatonSide:
    def __init__(self, args, problem, threads):
        p = problem
        cmd = [args.bin, "--model", p["pipe"], "--image", p["image"], "--width", str(p["side"]), "--height",
               str(p["side"]), "--captions", p["captions"], "--ids", p["ids"], "--threads", str(threads),
               "--max-sequence-length", str(args.max_sequence_length), "--dtype",
               "bf16" if p["dtype"] == torch.bfloat16 else "fp32"]
        if p["real"]:
            cmd += ["--hidden_layers", ",".join(str(k) for k in p["layers"])]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench_encoder exited {self.proc.wait()}")
        return json.loads(line)

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._read()

    def run(self, what, n):
        out = self.command(f"{what} {n}")
        self.peak_rss = out["peak_rss"]
        return out["seconds"]

    def close(self):
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            raise SystemExit(f"bench_encoder exited {self.proc.returncode}")


def max_rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def check(args, pt, bt, out_dir):
    """Both sides compute the same thing (else timing them compares different work)."""
    dump = os.path.join(out_dir, "baton_dump.safetensors")
    bt.command(f"dump {dump}")
    got = load_file(dump)
    with torch.no_grad():
        ids = pt.caption_ids(pt.captions[0])
        embeds = pt.encode_caption(pt.captions[0])[0]
        pixels = pt.load_pixels()
        packed_of_baton_pixels = pt.encode_pixels(got["pixels"])[0]
        packed = pt.encode_pixels(pixels)[0]
        tokens = pt.encode_tokens()
    res = {
        "ids_equal": bool(torch.equal(ids, got["input_ids"])),
        "caption_rel": max_rel(got["prompt_embeds"], embeds),
        "tokens_rel": max_rel(got["tokens_out"], tokens),
        "pixels_max_abs_255": float((got["pixels"] - pixels).abs().max() * 127.5),
        "pixels_mean_abs_255": float((got["pixels"] - pixels).abs().mean() * 127.5),
        "packed_rel": max_rel(got["packed"], packed_of_baton_pixels),
        "packed_rel_own_pixels": max_rel(got["packed"], packed),
        "real_tokens": [int((pt.caption_ids(c) != pt.tokenizer.pad_token_id).sum()) for c in pt.captions],
    }
    print(f"  same math? ids equal {res['ids_equal']} ({res['real_tokens']} real of {args.max_sequence_length}); "
          f"caption embeds rel {res['caption_rel']:.1e}; tokens rel {res['tokens_rel']:.1e}; pixels max |diff| "
          f"{res['pixels_max_abs_255']:.1f}/255, mean {res['pixels_mean_abs_255']:.2f}/255; packed latents rel "
          f"{res['packed_rel']:.1e} (same pixels), "
          f"{res['packed_rel_own_pixels']:.1e} (each side's own resize)", flush=True)
    tol = args.check_tol * (30 if pt.problem["dtype"] == torch.bfloat16 else 1)
    bad = (not res["ids_equal"] or max(res["caption_rel"], res["tokens_rel"], res["packed_rel"]) > tol
           or res["pixels_mean_abs_255"] > 1.0)
    if bad:
        raise SystemExit("the two sides disagree: timing them would compare different work")
    return res


def cpu_seconds_busy():
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle():
    time.sleep(0.3)  # idle OpenMP workers of the side that just ran spin for a moment before sleeping


def bench(args, problem, config, threads, out_dir):
    torch.set_num_threads(threads)
    pt = PyTorchSide(args, problem)
    bt = BatonSide(args, problem, threads)
    checked = check(args, pt, bt, out_dir)
    metrics = ("caption", "tokens") if problem["real"] else ("caption", "image", "tokens")
    for what in metrics:  # warm-up
        bt.run(what, 1)
        settle()
        pt.run(what, 1)
    times = {side: {m: [] for m in metrics} for side in ("baton", "pytorch")}
    wall0, busy0 = time.perf_counter(), cpu_seconds_busy()
    own0 = process_cpu_seconds(os.getpid()) + process_cpu_seconds(bt.proc.pid)
    for r in range(args.rounds):
        order = ["baton", "pytorch"] if r % 2 == 0 else ["pytorch", "baton"]
        for side in order:
            for what in metrics:
                settle()
                times[side][what] += (bt if side == "baton" else pt).run(what, args.reps)
        print(f"  round {r + 1}/{args.rounds} ({order[0]} first): " + ", ".join(
            f"{m} B {statistics.median(times['baton'][m][-args.reps:]):.4f} s P "
            f"{statistics.median(times['pytorch'][m][-args.reps:]):.4f} s" for m in metrics), flush=True)
    own = process_cpu_seconds(os.getpid()) + process_cpu_seconds(bt.proc.pid) - own0
    others = max(0.0, cpu_seconds_busy() - busy0 - own) / (time.perf_counter() - wall0)
    bt.close()
    med = {side: {m: statistics.median(times[side][m]) for m in metrics} for side in times}
    res = {"config": config, "threads": threads, "image_side": problem["side"], "dtype": dtype_of(args, config)}
    for m in metrics[:-1]:
        res[f"baton_s_per_{m}"] = round(med["baton"][m], 5)
        res[f"pytorch_s_per_{m}"] = round(med["pytorch"][m], 5)
        res[f"{m}_speedup"] = round(med["pytorch"][m] / med["baton"][m], 3)
    res["baton_tokens_per_s"] = round(args.tokens / med["baton"]["tokens"], 1)
    res["pytorch_tokens_per_s"] = round(args.tokens / med["pytorch"]["tokens"], 1)
    res["tokens_speedup"] = round(med["pytorch"]["tokens"] / med["baton"]["tokens"], 3)
    res["others_cpu_cores"] = round(others, 3)
    res["baton_peak_rss_gib"] = round(bt.peak_rss / 2**30, 3)
    if problem["real"]:  # the slice's layers, per layer (the embedding gather is a few rows)
        n = max(problem["layers"])
        res["baton_s_per_layer_tokens"] = round(med["baton"]["tokens"] / n, 4)
        res["pytorch_s_per_layer_tokens"] = round(med["pytorch"]["tokens"] / n, 4)
        res["baton_s_per_layer_caption"] = round(med["baton"]["caption"] / n, 4)
    res["check"] = {k: (float(f"{v:.3e}") if isinstance(v, float) else v) for k, v in checked.items()}
    return res


def main():
    args = parse_args()
    import diffusers
    import transformers
    transformers.logging.set_verbosity_error()  # the vision tower's load report: the bench never runs it
    diffusers.logging.set_verbosity_error()
    if not os.path.exists(args.bin):
        raise SystemExit(f"{args.bin} not found: build it with `cmake --build build --target bench_encoder`")
    print(f"torch {torch.__version__}; max_sequence_length {args.max_sequence_length}; tokens/s over {args.tokens} "
          f"tokens; 1 warm-up + {args.rounds} rounds x {args.reps} calls per metric and side, sides alternating; "
          "figures are medians; speedup = PyTorch s / Baton s (> 1: Baton faster)", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="baton-bench-encoder-") as out_dir:
        for config in args.configs.split(","):
            if config not in CONFIGS:
                raise SystemExit(f"--configs: unknown config '{config}' (allowed: {', '.join(CONFIGS)})")
            problem = write_problem(args, args.bin, config, out_dir)
            for threads in [int(t) for t in args.threads.split(",")]:
                print(f"{config} threads={threads}:", flush=True)
                r = bench(args, problem, config, threads, out_dir)
                image = "" if problem["real"] else (
                    f"image {r['image_side']}x{r['image_side']} Baton {r['baton_s_per_image']:.4f} s PyTorch "
                    f"{r['pytorch_s_per_image']:.4f} s ({r['image_speedup']:.2f}x); ")
                print(f"{config} {r['dtype']} threads={threads}: caption Baton {r['baton_s_per_caption']:.4f} s "
                      f"PyTorch {r['pytorch_s_per_caption']:.4f} s ({r['caption_speedup']:.2f}x); {image}text encoder "
                      f"Baton {r['baton_tokens_per_s']:.0f} tok/s PyTorch {r['pytorch_tokens_per_s']:.0f} tok/s "
                      f"({r['tokens_speedup']:.2f}x); Baton peak RSS {r['baton_peak_rss_gib']:.2f} GiB; other "
                      f"processes used {r['others_cpu_cores']:.2f} cores", flush=True)
                if problem["real"]:
                    print(f"{config} threads={threads}: per layer: {args.tokens} tokens Baton "
                          f"{r['baton_s_per_layer_tokens']:.3f} s PyTorch {r['pytorch_s_per_layer_tokens']:.3f} s; "
                          f"a caption (median) Baton {r['baton_s_per_layer_caption']:.3f} s", flush=True)
                if r["others_cpu_cores"] > 0.05:
                    print("WARNING: other processes were using the CPU during the timed rounds: these times are not "
                          "a clean measurement", flush=True)
                results.append(r)
    print(json.dumps({"bench": "encoder", "torch": torch.__version__, "max_sequence_length": args.max_sequence_length,
                      "tokens": args.tokens, "rounds": args.rounds, "reps": args.reps, "results": results}))


if __name__ == "__main__":
    sys.exit(main())
