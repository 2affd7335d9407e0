"""The LoRA exchange of data-parallel replicas at FLUX.2-dev's adapter size, on shaped links (issue 23).

Two replicas of a 2-stage pipeline, each stage worker in its own network namespace and the coordinator in a fifth,
every link shaped with tc tbf (tests/netns/topology.sh), mutual TLS. The model is the namespace tests' small FLUX.2
at twice the width (D 512, 1 + 1 blocks, 64 + 16 tokens) with an all-linear LoRA whose rank is chosen so that the adapters hold
--lora_params parameters (default 77.1 M: FLUX.2-dev's rank-16 all-linear adapters): a synthetic LoRA of the real
size on a model whose compute is small, so the step is mostly the exchange. Every step each replica's stages send
their fp32 gradients to the coordinator and get the new adapters back; the report gives, per link rate, the median
step seconds (after the first), the bytes the coordinator's link carried per step, and the seconds those bytes take
at the rate.

    sudo .venv/bin/python bench/replicas_exchange_netns.py [--rates 1gbit,10gbit] [--steps 4]

Needs root and iproute2. The last line is one JSON object.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from safetensors.numpy import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "netns"))
import test_two_hosts as two  # noqa: E402  (the model, job, certificates, worker start and link counters)

HOSTS = {"c": "10.97.0.10", "r0s0": "10.97.0.11", "r0s1": "10.97.0.12", "r1s0": "10.97.0.13", "r1s1": "10.97.0.14"}
PREFIX = "baton-netns-xchg-"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1gbit,10gbit", help="tc tbf rates, one run each")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lora_params", type=float, default=77.1e6)
    return p.parse_args()


def write_job(work):
    """The namespace tests' model and job at twice the width (D 512, so that a LoRA of the real size needs a rank
    within the stage worker's limit of 4096)."""
    job = two.write_job(work)
    config = json.load(open(os.path.join(work, "config.json")))
    config.update({"num_attention_heads": 8, "joint_attention_dim": 512})
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    baton = os.path.join(two.BIN_DIR, "baton")
    for folder in ("model", "cache"):
        shutil.rmtree(os.path.join(work, folder))
    two.run([baton, "init-weights", "--config", f"{work}/config.json", "--out", f"{work}/model", "--seed", "0"])
    two.run([baton, "synthetic-cache", "--config", f"{work}/config.json", "--out", f"{work}/cache", "--samples",
             str(two.MICRO_BATCHES * 2), "--grids", "8x8", "--text-len", "16", "--seed", "0"])
    return job


def lora_params(run_dir):
    return sum(t.size for t in load_file(os.path.join(run_dir, "lora.safetensors")).values())


def sized_job(work, job, rank, steps):
    """The namespace tests' job with the LoRA rank that gives the wanted adapter size, 2 replicas, an even split."""
    text = open(job).read()
    text = re.sub(r"rank: \d+, alpha: \d+", f"rank: {rank}, alpha: {rank}", text)
    text = re.sub(r"steps: \d+", f"steps: {steps}", text)
    path = os.path.join(work, "job_sized.yaml")
    with open(path, "w") as f:
        f.write(text + "replicas: 2\nreplica_split: equal\n")
    return path


def run_at(tag, work, job, rate):
    """One run of the job over the namespaces at `rate`: (step seconds after the first, coordinator link bytes)."""
    two.run([two.TOPOLOGY, "up", tag, rate] + [f"{h}={ip}/24" for h, ip in HOSTS.items()])
    try:
        certs = os.path.join(work, "certs")
        shutil.rmtree(certs, ignore_errors=True)
        two.run([os.path.join(two.BIN_DIR, "baton"), "certs", "--out", certs, "--hosts", ",".join(HOSTS.values())])
        names = [h for h in HOSTS if h != "c"]
        addresses = [f"{HOSTS[h]}:{two.PORT}" for h in names]
        logs = [open(os.path.join(work, f"{h}.log"), "w") for h in names]
        workers = [two.start_worker(f"{tag}-{h}", a, log, certs, work) for h, a, log in zip(names, addresses, logs)]
        try:
            before = two.link_bytes(tag)
            out = two.run(["ip", "netns", "exec", f"{tag}-c", os.path.join(two.BIN_DIR, "coordinator"), "--workers",
                           f"{addresses[0]},{addresses[1]};{addresses[2]},{addresses[3]}", "--tls_dir",
                           os.path.join(certs, HOSTS["c"]), "--job", job, "--output", f"{work}/run_{rate}"],
                          timeout=1200).stdout
            after = two.link_bytes(tag)
        finally:
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait(timeout=30)
        seconds = [float(s) for s in re.findall(r"([0-9.]+) s/step", out)]
        sent, received = (after["c"][i] - before["c"][i] for i in (0, 1))  # switch port "c": the coordinator's host
        return seconds, sent, received
    finally:
        subprocess.run([two.TOPOLOGY, "down", tag], check=False)


def main():
    args = parse_args()
    tag = f"{PREFIX}{os.getpid()}"
    two.skip_unless_possible(tag)
    subprocess.run([two.TOPOLOGY, "reap", PREFIX], check=False)
    two.HOSTS = HOSTS
    work = tempfile.mkdtemp(prefix="baton-xchg-")
    try:
        job = write_job(work)
        two.run([os.path.join(two.BIN_DIR, "coordinator"), "--stages", "2", "--job", job, "--steps", "1", "--output",
                 f"{work}/probe"])
        per_rank = lora_params(f"{work}/probe") / 8
        rank = max(1, round(args.lora_params / per_rank))
        sized = sized_job(work, job, rank, args.steps)
        print(f"LoRA rank {rank}: {rank * per_rank / 1e6:.1f} M parameters ({rank * per_rank * 4 / 1e6:.1f} MB fp32)",
              flush=True)
        results = []
        for rate in args.rates.split(","):
            seconds, sent, received = run_at(tag, work, sized, rate)
            steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
            bits = float(re.match(r"([0-9.]+)", rate).group(1)) * {"g": 1e9, "m": 1e6}[rate.rstrip("bit")[-1]]
            wire = (sent + received) / args.steps
            row = {"rate": rate, "step_seconds": steady, "all_steps": seconds,
                   "coordinator_link_mb_per_step": round(wire / 1e6, 1),
                   "coordinator_link_seconds_at_rate": round(max(sent, received) / args.steps * 8 / bits, 3)}
            print(f"{rate}: {steady:.2f} s/step (median after the first of {seconds}); the coordinator's link carried "
                  f"{sent / args.steps / 1e6:.1f} MB out + {received / args.steps / 1e6:.1f} MB in per step "
                  f"({row['coordinator_link_seconds_at_rate']:.2f} s each way at {rate})", flush=True)
            results.append(row)
        print(json.dumps({"bench": "replicas_exchange_netns", "lora_rank": rank,
                          "lora_params": rank * per_rank, "steps": args.steps, "results": results}))
    finally:
        subprocess.run([two.TOPOLOGY, "down", tag], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
