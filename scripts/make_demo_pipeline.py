#!/usr/bin/env python3
"""Pretrains the tiny FLUX.2 pipeline's VAE and transformer on a synthetic "base world", for the demo.

`baton init-weights --pipeline tiny` writes a pipeline whose weights are random, so its pictures are noise. This
script (dev only, run with the project venv: torch + diffusers) takes such a folder and trains, on CPU:

1. the VAE (diffusers' AutoencoderKLFlux2, from the folder's vae/config.json) to reconstruct drawn pictures of
   circles and squares (scripts/make_sample_images.py's scene(): every foreground × background colour, fg != bg,
   at 128×128 and 160×96), then sets its latent BatchNorm statistics (vae.bn, over the 2×2-patchified latents)
   to those of the training latents, so the normalised latents the transformer sees are about unit variance;
2. the transformer (Flux2Transformer2DModel, from transformer/config.json) with FLUX.2's rectified-flow loss on
   those latents (x_t = (1 - t) x0 + t noise, target noise - x0), conditioned on the captions encoded by the
   folder's own (random, deterministic) text encoder through diffusers' Flux2Pipeline.encode_prompt.

Triangles and stripes are left out on purpose: the demo's LoRA teaches them from data/sample/. The text encoder
and tokenizer are not changed (baton init-weights regenerates them at demo time); only transformer/ and vae/ are
written, in the same key names, layout and dtype (fp32) as the files baton wrote. Deterministic: seeded, fixed
thread count. Finally it samples a few prompts with diffusers' Flux2Pipeline (28 steps, guidance 4.0) into a
contact sheet. About 10 minutes on 2 cores (Intel Xeon): the VAE ~3, the transformer ~7.

The transformer first sees only the last 16 of the 128 prompt tokens (at their own positions): with all 128, of which
the same chat template fills 81, it learned to ignore the text (the loss with shuffled captions equalled the loss
with the right ones after 2000 steps); the last 1000 steps see all 128, as the demo's encoder gives them.

    build/bin/baton init-weights --pipeline tiny --out /tmp/tiny --seed 0
    .venv/bin/python scripts/make_demo_pipeline.py --pipeline /tmp/tiny --out data/demo_pipeline
"""

import argparse
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Pipeline, Flux2Transformer2DModel
from PIL import Image, ImageDraw
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Mistral3ForConditionalGeneration, PreTrainedTokenizerFast

sys.dont_write_bytecode = True  # no scripts/__pycache__ from the import below
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_sample_images import COLORS, scene  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHAPES = ("circle", "square")
SIZES = ((128, 128), (160, 96))  # (width, height); the wide ones get ", wide" like data/sample's
MAX_SEQUENCE_LENGTH = 128  # what scripts/demo.sh passes to encoder_worker
SHORT_TEXT = 16  # the last 16 of the 128 prompt tokens hold the whole caption (left padding) and "[/INST]"
CHECK_PROMPTS = ["a red circle on a blue background", "a blue square on a yellow background",
                 "an orange circle on a purple background", "a white square on a black background",
                 "a green triangle on a white background", "red and white vertical stripes"]

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def caption(shape, fg, bg, wide):
    return f"{article(fg)} {fg} {shape} on {article(bg)} {bg} background" + (", wide" if wide else "")


def draw(shape, fg, bg, w, h):
    pixel = scene(shape, fg, bg, w, h)
    return np.array([[pixel(x, y) for x in range(w)] for y in range(h)], dtype=np.uint8)


def base_world(sizes=SIZES):
    """{(w, h): (images [N, 3, h, w] in [-1, 1], captions)}: circles and squares, every fg × bg, fg != bg."""
    world = {}
    for w, h in sizes:
        images, captions = [], []
        for shape in SHAPES:
            for fg in COLORS:
                for bg in COLORS:
                    if fg != bg:
                        images.append(draw(shape, fg, bg, w, h))
                        captions.append(caption(shape, fg, bg, wide=(w != h)))
        x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        world[(w, h)] = (x.contiguous(), captions)
    return world


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))


# ---------------------------------------------------------------------------------------------------------------- VAE


def vae_phases(args):
    """(scale divisor, batch, steps): the same scenes drawn at 1/4 and 1/2 size first (cheap, and the same
    composition, so the same GroupNorm statistics), then at full size."""
    return [(4, 16, args.vae_steps[0]), (2, 4, args.vae_steps[1]), (1, 2, args.vae_steps[2])]


def train_vae(vae, world, args, gen):
    """Reconstruction: MSE + L1 of decode(posterior mean), plus a small penalty on the mean's size. Whole
    pictures, one size per batch: the GroupNorms normalise over the whole picture, so crops of one flat colour
    would teach the wrong statistics. AdamW, warmup then cosine decay."""
    opt = torch.optim.AdamW(vae.parameters(), lr=args.vae_lr, weight_decay=0.0)
    vae.train()
    total = sum(n for _, _, n in vae_phases(args))
    step = 0
    for div, batch, steps in vae_phases(args):
        groups = [world[(w, h)][0] if div == 1 else base_world(((w // div, h // div),))[(w // div, h // div)][0]
                  for w, h in SIZES]
        for _ in range(steps):
            images = groups[step % len(groups)]
            x = images[torch.randint(images.shape[0], (batch,), generator=gen)]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total, args.vae_lr, 20)
            posterior = vae.encode(x).latent_dist
            recon = vae.decode(posterior.mean).sample
            mse = F.mse_loss(recon, x)
            reg = posterior.mean.pow(2).mean()  # keeps the latents from drifting large (the encoder uses the mean)
            loss = mse + (recon - x).abs().mean() + args.vae_reg * reg
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
            opt.step()
            if step % 100 == 0 or step == total - 1:
                log(f"vae step {step:4d}/{total} ({x.shape[3]}x{x.shape[2]} x{batch})  mse {mse.item():.5f}  "
                    f"mean^2 {reg.item():.3f}")
            step += 1
    vae.eval()


@torch.no_grad()
def encode_latents(vae, images):
    """Posterior mean, 2×2-patchified: [N, 4 * latent_channels, h / 16, w / 16] (un-normalised)."""
    z = torch.cat([vae.encode(images[i:i + 16]).latent_dist.mean for i in range(0, images.shape[0], 16)])
    return Flux2Pipeline._patchify_latents(z)


@torch.no_grad()
def reconstruction_error(vae, images):
    """Mean absolute error in [0, 255] units of decode(encode mean)."""
    errs = []
    for i in range(0, images.shape[0], 16):
        x = images[i:i + 16]
        recon = vae.decode(vae.encode(x).latent_dist.mean).sample.clamp(-1, 1)
        errs.append(((recon - x).abs() * 127.5).flatten(1).mean(1))
    return torch.cat(errs).mean().item()


# -------------------------------------------------------------------------------------------------------- transformer


@torch.no_grad()
def text_gap(model, data):
    """Loss at t = 0.8 on fixed records with their own captions vs. with shuffled captions: the gap is what the
    model takes from the text."""
    model.eval()
    x0, embeds, img_ids, txt_ids = data[next(iter(data))]
    g = torch.Generator().manual_seed(1234)
    idx = torch.randperm(x0.shape[0], generator=g)[: img_ids.shape[0]]
    b = idx.numel()
    noise = torch.randn(x0[idx].shape, generator=g)
    t = torch.full((b,), 0.8)
    xt = 0.2 * x0[idx] + 0.8 * noise
    out = []
    for e in (embeds[idx], embeds[idx.roll(1)]):
        pred = model(hidden_states=xt, encoder_hidden_states=e, timestep=t, guidance=torch.full((b,), 3.5),
                     img_ids=img_ids, txt_ids=txt_ids, return_dict=False)[0]
        out.append(F.mse_loss(pred, noise - x0[idx]).item())
    return f"{out[0]:.4f} own captions, {out[1]:.4f} shuffled"


def train_transformer(model, data, args, gen):
    """FLUX.2's rectified flow: x_t = (1 - t) x0 + t noise, the model predicts noise - x0 at timestep t (diffusers'
    timestep in [0, 1]; the model scales by 1000 inside), guidance drawn uniformly in [1, 5]; one size per batch;
    AdamW, warmup then cosine decay. t is uniform, shifted by t_shift as the sampler's schedule is (FLUX.2 samples
    128×128 with a shift of ~5.9): the text only matters at the noisy end, and uniform t left it unlearned.

    With all 128 prompt tokens from the start the model did not pick up the text at all in a few thousand steps
    (the caption is ~10 of them; the rest, the system prompt and padding, are the same for every caption). So the
    first short_text_steps batches see only the last SHORT_TEXT tokens, at their real positions (txt_ids), which
    hold the whole caption; the model learns to read colour and shape there, three times cheaper per step, and
    the remaining steps, on the full 128 tokens as the pipelines give them, carry it over."""
    keys = list(data)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.99))
    model.train()
    ema = None
    for step in range(args.steps):
        key = keys[int(torch.randint(len(keys), (1,), generator=gen))]
        x0_all, embeds_all, img_ids, txt_ids = data[key]
        idx = torch.randint(x0_all.shape[0], (args.batch,), generator=gen)
        x0, embeds = x0_all[idx], embeds_all[idx]
        if step < args.short_text_steps:  # the caption's tokens only
            embeds, txt_ids = embeds[:, -SHORT_TEXT:], txt_ids[:, -SHORT_TEXT:]
        b = x0.shape[0]
        t = torch.rand(b, generator=gen)
        if args.t_shift != 1.0:  # the sampler's shift: more of the training at the noisy end, where the text decides
            t = args.t_shift * t / (1 + (args.t_shift - 1) * t)
        noise = torch.randn(x0.shape, generator=gen)
        xt = (1 - t.view(b, 1, 1)) * x0 + t.view(b, 1, 1) * noise
        guidance = 1.0 + 4.0 * torch.rand(b, generator=gen)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        pred = model(hidden_states=xt, encoder_hidden_states=embeds, timestep=t, guidance=guidance,
                     img_ids=img_ids[:b], txt_ids=txt_ids[:b], return_dict=False)[0]
        loss = F.mse_loss(pred, noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 100 == 0 or step == args.steps - 1:
            log(f"transformer step {step:5d}/{args.steps}  loss {loss.item():.4f}  (ema {ema:.4f})  "
                f"lr {opt.param_groups[0]['lr']:.2e}")
        if step % 500 == 0 or step == args.steps - 1:
            log(f"  text conditioning at t = 0.8: loss {text_gap(model, data)}")
            model.train()
    model.eval()
    return ema


# ------------------------------------------------------------------------------------------------------------- output


def write_like(module, src_dir, out_dir):
    """Writes module's weights under exactly the keys (fp32) of src_dir's safetensors file, plus its config."""
    name = "diffusion_pytorch_model.safetensors"
    with safe_open(os.path.join(src_dir, name), framework="pt") as f:
        ref = {k: (f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for k in f.keys()}
    sd = module.state_dict()
    if set(ref) != set(sd):
        raise SystemExit(f"{src_dir}: key sets differ: only baton {sorted(set(ref) - set(sd))[:5]}, "
                         f"only ours {sorted(set(sd) - set(ref))[:5]}")
    out = {}
    for k, (shape, dtype) in ref.items():
        if list(sd[k].shape) != list(shape):
            raise SystemExit(f"{k}: shape {list(sd[k].shape)} != baton's {shape}")
        if dtype != "F32" and k.rsplit(".", 1)[-1] != "num_batches_tracked":
            raise SystemExit(f"{k}: baton wrote {dtype}, expected F32")
        v = sd[k].detach().contiguous()
        out[k] = v.float() if v.is_floating_point() else v
    os.makedirs(out_dir, exist_ok=True)
    save_file(out, os.path.join(out_dir, name), metadata={"format": "pt"})
    os.chmod(os.path.join(out_dir, name), 0o644)
    shutil.copyfile(os.path.join(src_dir, "config.json"), os.path.join(out_dir, "config.json"))
    return os.path.getsize(os.path.join(out_dir, name))


def contact_sheet(images, labels, cols, path):
    w, h = images[0].size
    rows = (len(images) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * w, rows * (h + 14)), (255, 255, 255))
    draw_ = ImageDraw.Draw(sheet)
    for i, (im, label) in enumerate(zip(images, labels)):
        x, y = (i % cols) * w, (i // cols) * (h + 14)
        sheet.paste(im, (x, y + 14))
        draw_.text((x + 2, y + 1), label[:24], fill=(0, 0, 0))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    sheet.save(path)


def set_latent_bn(vae, latents):
    """vae.bn's running statistics := those of the patchified training latents (all positions, both sizes), so
    that (z - running_mean) / sqrt(running_var + eps), what the pipelines feed the transformer, is ~unit variance."""
    flat = torch.cat([z.permute(0, 2, 3, 1).reshape(-1, z.shape[1]) for z in latents.values()])
    with torch.no_grad():
        vae.bn.running_mean.copy_(flat.mean(0))
        vae.bn.running_var.copy_(flat.var(0, unbiased=False))
    log(f"latent bn: |mean| {flat.mean(0).abs().mean():.3f}, std range [{flat.std(0).min():.3f}, "
        f"{flat.std(0).max():.3f}]")


def load_pipe(folder, vae):
    """diffusers' Flux2Pipeline on the folder's scheduler, text encoder and tokenizer (left as they are)."""
    sub = lambda name: os.path.join(folder, name)  # noqa: E731
    pipe = Flux2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(sub("scheduler")), vae=vae,
        text_encoder=Mistral3ForConditionalGeneration.from_pretrained(sub("text_encoder"),
                                                                      dtype=torch.float32).eval(),
        tokenizer=PreTrainedTokenizerFast.from_pretrained(sub("tokenizer")),
        transformer=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@torch.no_grad()
def training_data(pipe, vae, world, batch):
    """{size: (x0 packed normalised latent tokens [N, HW, C], prompt_embeds [N, L, D], img_ids, txt_ids)}."""
    latents = {key: encode_latents(vae, images) for key, (images, _) in world.items()}
    set_latent_bn(vae, latents)
    mean = vae.bn.running_mean.view(1, -1, 1, 1)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps)
    data = {}
    for key, (images, captions) in world.items():
        embeds = torch.cat([pipe.encode_prompt(captions[i:i + 32], device=torch.device("cpu"),
                                               max_sequence_length=MAX_SEQUENCE_LENGTH)[0]
                            for i in range(0, len(captions), 32)])
        z = (latents[key] - mean) / std
        x0 = Flux2Pipeline._pack_latents(z)
        img_ids = Flux2Pipeline._prepare_latent_ids(z[:1]).expand(batch, -1, -1)
        txt_ids = Flux2Pipeline._prepare_text_ids(embeds[:1]).expand(batch, -1, -1)
        data[key] = (x0.contiguous(), embeds.contiguous(), img_ids, txt_ids)
        log(f"encoded {len(captions)} captions of {key[0]}x{key[1]}: embeds {tuple(embeds.shape)} std "
            f"{embeds.std():.3f} (max |e| {embeds.abs().max():.1f}), tokens {tuple(x0.shape)} std {x0.std():.3f}")
    return data


@torch.no_grad()
def check(pipe, transformer, vae, seeds, path):
    """Samples CHECK_PROMPTS with diffusers' Flux2Pipeline (28 steps, guidance 4.0, 128×128) into a contact
    sheet: one column per prompt, one row per seed."""
    pipe.transformer, pipe.vae = transformer.eval(), vae.eval()
    images, labels = [], []
    for seed in range(seeds):
        out = pipe(prompt=CHECK_PROMPTS, num_inference_steps=28, guidance_scale=4.0, width=128, height=128,
                   max_sequence_length=MAX_SEQUENCE_LENGTH, generator=torch.Generator("cpu").manual_seed(seed))
        images += out.images
        labels += [c.replace(" background", "").replace("vertical ", "") for c in CHECK_PROMPTS]
    contact_sheet(images, labels, len(CHECK_PROMPTS), path)
    log(f"contact sheet ({len(CHECK_PROMPTS)} prompts x {seeds} seeds): {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pipeline", required=True, help="a folder from `baton init-weights --pipeline tiny --seed 0`")
    p.add_argument("--out", default=os.path.join(REPO, "data", "demo_pipeline"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vae_steps", type=int, nargs=3, default=[1200, 600, 400],
                   help="steps at 1/4 size, 1/2 size, full size")
    p.add_argument("--vae_lr", type=float, default=1e-3)
    p.add_argument("--vae_reg", type=float, default=1e-4)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--t_shift", type=float, default=3.0)
    p.add_argument("--short_text_steps", type=int, default=3000,
                   help="first steps on the caption's tokens only (cheaper, and the text is learned much faster)")
    p.add_argument("--sheet", default="/tmp/demo_pretrain/contact.png")
    p.add_argument("--check_seeds", type=int, default=3)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    sub = lambda name: os.path.join(args.pipeline, name)  # noqa: E731

    world = base_world()
    log(f"drew {sum(x.shape[0] for x, _ in world.values())} pictures: "
        + ", ".join(f"{w}x{h}: {x.shape[0]}" for (w, h), (x, _) in world.items()))

    # 1. VAE.
    torch.manual_seed(args.seed + 1)
    vae = AutoencoderKLFlux2.from_config(AutoencoderKLFlux2.load_config(sub("vae")))
    train_vae(vae, world, args, gen)
    for (w, h), (images, _) in world.items():
        log(f"vae reconstruction {w}x{h}: mean abs error {reconstruction_error(vae, images):.2f} / 255")

    # 2. Latents (and vae.bn's statistics) and captions through the folder's own text encoder.
    pipe = load_pipe(args.pipeline, vae)
    data = training_data(pipe, vae, world, args.batch)

    # 3. Transformer, from scratch.
    torch.manual_seed(args.seed + 2)
    transformer = Flux2Transformer2DModel.from_config(Flux2Transformer2DModel.load_config(sub("transformer")))
    loss = train_transformer(transformer, data, args, gen)
    log(f"transformer final loss (ema) {loss:.4f}")

    # 4. Write transformer/ and vae/ under baton's key names.
    for name, module in (("transformer", transformer), ("vae", vae)):
        size = write_like(module, sub(name), os.path.join(args.out, name))
        log(f"wrote {os.path.join(args.out, name)}: {size / 1e6:.2f} MB")

    # 5. Check with diffusers' pipeline: the tiny folder with the trained weights (read back) substituted.
    check(pipe, Flux2Transformer2DModel.from_pretrained(os.path.join(args.out, "transformer")),
          AutoencoderKLFlux2.from_pretrained(os.path.join(args.out, "vae")), args.check_seeds, args.sheet)
    log("done")


if __name__ == "__main__":
    main()
