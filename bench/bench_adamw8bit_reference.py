"""The reference side of bench_optimizers' adamw8bit row: bitsandbytes' AdamW8bit and torch's fused AdamW on this
CPU, one step each over the same adapters (the rank-16 adapters of FLUX.2-dev's blocks, random fp32 gradients), in
one run, with their ratio -- to set beside Baton's (`build/bin/bench_optimizers`), whose 8-bit step is bitsandbytes'
CPU algorithm operation for operation.

    .venv/bin/python bench/bench_adamw8bit_reference.py [--double 2] [--single 4] [--steps 10] [--threads 2]
"""

import argparse
import time

import bitsandbytes as bnb
import torch

D, FF = 6144, 18432


def adapter_shapes(doubles, singles, rank):
    linears = []
    for _ in range(doubles):
        linears += [(D, D)] * 8 + [(D, 2 * FF), (FF, D), (D, 2 * FF), (FF, D)]
    for _ in range(singles):
        linears += [(D, 3 * D + 2 * FF), (D + FF, D)]
    return [s for i, o in linears for s in ((rank, i), (o, rank))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--double", type=int, default=2)
    ap.add_argument("--single", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    params = [torch.nn.Parameter(torch.randn(s) * 0.01) for s in adapter_shapes(a.double, a.single, a.rank)]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    print(f"{len(params)} adapters, {sum(p.numel() for p in params) * 4 / 1e6:.1f} MB fp32, {a.steps} steps each, "
          f"{a.threads} threads")
    times = {}
    for name, opt in [("torch AdamW (fused)", torch.optim.AdamW(params, lr=1e-4, fused=True)),
                      ("bitsandbytes AdamW8bit", bnb.optim.AdamW8bit(params, lr=1e-4, weight_decay=0.0))]:
        opt.step()  # the state made, untimed
        t0 = time.perf_counter()
        for _ in range(a.steps):
            opt.step()
        times[name] = (time.perf_counter() - t0) / a.steps * 1000
        print(f"{name:24s} {times[name]:8.1f} ms")
    print(f"AdamW8bit / AdamW: {times['bitsandbytes AdamW8bit'] / times['torch AdamW (fused)']:.2f}x")


if __name__ == "__main__":
    main()
