"""The LoRA exchange at FLUX.2-dev's adapter size, on shaped links (issues 23 and 34).

Two replicas (--replicas 2, the default) or one (--replicas 1) of a 2-stage pipeline, each stage worker in its own network namespace and the coordinator in a fifth,
every link shaped with tc tbf (tests/netns/topology.sh), mutual TLS. The model is the namespace tests' small FLUX.2
at twice the width (D 512, 1 + 1 blocks, 64 + 16 tokens) with an all-linear LoRA whose rank is chosen so that the adapters hold
--lora_params parameters (default 77.1 M: FLUX.2-dev's rank-16 all-linear adapters): a synthetic LoRA of the real
size on a model whose compute is small, so the step is mostly the exchange. Each run uses one of the job's
`replica_exchange` ways: `coordinator` (every step each replica's stages send their fp32 gradients to the coordinator
and get the new adapters back) or `allreduce` (stage s of each replica sums its gradients with the other's over a c10d
Gloo group, worker to worker, and steps AdamW itself; with one replica there is nothing to sum: each stage steps its own
AdamW and only the squared norms and the clip factor cross the coordinator's link). The report gives, per link rate and exchange, the median step
seconds (after the first), the bytes the coordinator's link and a stage-1 worker's link carried per step, and the
seconds the coordinator's bytes take at the rate.

    sudo .venv/bin/python bench/replicas_exchange_netns.py [--rates 1gbit,10gbit] [--exchanges coordinator,allreduce]
        [--steps 4] [--replicas 2]

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
    p.add_argument("--exchanges", default="coordinator,allreduce", help="the job's replica_exchange, one run each")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lora_params", type=float, default=77.1e6)
    p.add_argument("--replicas", type=int, default=2, choices=(1, 2))
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


def sized_job(work, job, rank, steps, exchange, replicas):
    """The namespace tests' job with the LoRA rank that gives the wanted adapter size, `replicas`, an even split."""
    text = open(job).read()
    text = re.sub(r"rank: \d+, alpha: \d+", f"rank: {rank}, alpha: {rank}", text)
    text = re.sub(r"steps: \d+", f"steps: {steps}", text)
    path = os.path.join(work, f"job_{exchange}.yaml")
    with open(path, "w") as f:
        f.write(text + f"replicas: {replicas}\nreplica_split: equal\nreplica_exchange: {exchange}\n")
    return path


def run_at(tag, work, job, rate, replicas):
    """One run of the job over the namespaces at `rate`: (step seconds, the link bytes of every host)."""
    hosts = {h: ip for h, ip in HOSTS.items() if h == "c" or int(h[1]) < replicas}
    two.run([two.TOPOLOGY, "up", tag, rate] + [f"{h}={ip}/24" for h, ip in hosts.items()])
    try:
        certs = os.path.join(work, "certs")
        shutil.rmtree(certs, ignore_errors=True)
        two.run([os.path.join(two.BIN_DIR, "baton"), "certs", "--out", certs, "--hosts", ",".join(hosts.values())])
        names = [h for h in hosts if h != "c"]
        addresses = [f"{HOSTS[h]}:{two.PORT}" for h in names]
        logs = [open(os.path.join(work, f"{h}.log"), "w") for h in names]
        workers = [two.start_worker(f"{tag}-{h}", a, log, certs, work) for h, a, log in zip(names, addresses, logs)]
        try:
            before = two.link_bytes(tag)
            groups = ";".join(",".join(addresses[2 * r:2 * r + 2]) for r in range(replicas))
            out = two.run(["ip", "netns", "exec", f"{tag}-c", os.path.join(two.BIN_DIR, "coordinator"), "--workers",
                           groups, "--tls_dir",
                           os.path.join(certs, HOSTS["c"]), "--job", job, "--output",
                           f"{work}/run_{rate}_{os.path.basename(job)}"],
                          timeout=1200).stdout
            after = two.link_bytes(tag)
        finally:
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait(timeout=30)
        seconds = [float(s) for s in re.findall(r"([0-9.]+) s/step", out)]
        with open(os.path.join(f"{work}/run_{rate}_{os.path.basename(job)}", "train_log.jsonl")) as f:
            log = [json.loads(line) for line in f]
        return seconds, {h: (after[h][0] - before[h][0], after[h][1] - before[h][1]) for h in after}, log
    finally:
        subprocess.run([two.TOPOLOGY, "down", tag], check=False)


def report(rate, exchange, seconds, links, log, steps):
    """One run's row, printed: the median step after the first, the exchange's exposed seconds (after the step's
    micro-batches: the coordinator's optimizer step, or the stages' reduction and update) and the allreduce's own,
    and what the links carried per step (the whole run's bytes over its steps: start-up, the final read of the LoRA
    and the checkpoint included)."""
    steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    exposed = statistics.median(r["coordinator_seconds"]["optimizer"] for r in log[1:] or log)
    allreduce = [r["replica_allreduce_seconds"] for r in log[1:] or log if "replica_allreduce_seconds" in r]
    early = all(r.get("replica_allreduce_early", False) for r in log)
    bits = float(re.match(r"([0-9.]+)", rate).group(1)) * {"g": 1e9, "m": 1e6}[rate.rstrip("bit")[-1]]
    sent, received = links["c"]  # switch port "c": the coordinator's host
    worker = "r1s1" if "r1s1" in links else "r0s1"  # a stage-1 worker of the last replica
    worker_sent, worker_received = links[worker]
    row = {"rate": rate, "exchange": exchange, "step_seconds": steady, "all_steps": seconds,
           "coordinator_link_mb_per_step": round((sent + received) / steps / 1e6, 1),
           "coordinator_link_seconds_at_rate": round(max(sent, received) / steps * 8 / bits, 3),
           "stage_worker_link_mb_per_step": round((worker_sent + worker_received) / steps / 1e6, 1),
           "exposed_exchange_seconds": exposed,
           "allreduce_seconds": statistics.median(allreduce) if allreduce else None, "allreduce_early": early}
    print(f"{rate}, {exchange}: {steady:.2f} s/step (median after the first of {seconds}); per step the coordinator's "
          f"link carried {sent / steps / 1e6:.1f} MB out + {received / steps / 1e6:.1f} MB in "
          f"({row['coordinator_link_seconds_at_rate']:.2f} s each way at {rate}), worker {worker}'s "
          f"{worker_sent / steps / 1e6:.1f} MB out + {worker_received / steps / 1e6:.1f} MB in; after the micro-batches "
          f"{exposed:.2f} s (median)" + (f", the allreduce itself {row['allreduce_seconds']:.2f} s, begun when held: "
                                          f"{early}" if allreduce else ""), flush=True)
    return row


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
        print(f"LoRA rank {rank}: {rank * per_rank / 1e6:.1f} M parameters ({rank * per_rank * 4 / 1e6:.1f} MB fp32)",
              flush=True)
        results = []
        for rate in args.rates.split(","):
            for exchange in args.exchanges.split(","):
                sized = sized_job(work, job, rank, args.steps, exchange, args.replicas)
                seconds, links, log = run_at(tag, work, sized, rate, args.replicas)
                results.append(report(rate, exchange, seconds, links, log, args.steps))
        print(json.dumps({"bench": "replicas_exchange_netns", "replicas": args.replicas, "lora_rank": rank,
                          "lora_params": rank * per_rank, "steps": args.steps, "results": results}))
    finally:
        subprocess.run([two.TOPOLOGY, "down", tag], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
