"""Separate hosts: the coordinator and two stage workers in three network namespaces on one switch, over mutual TLS
with certificates from `baton certs` for the namespaces' addresses.

The hosts are namespaces c, s0, s1, wired through veth pairs to a bridge in a fourth (switch) namespace,
every link shaped to 1 Gbit/s both ways with tc tbf (tests/netns/topology.sh). A tiny 2-stage LoRA job runs
with --workers pointing at the namespace addresses, and its LoRA must equal, bit for bit, the same job run
on loopback with `coordinator --stages 2` (the network moves bytes; it must not change a single one). The
report gives per-link bytes and their transfer time at the shaped rate, the transfer seconds each stage worker
measured per link (its Prometheus metrics, scraped across the switch), and each stage's compute time
(train_log.jsonl's stage_busy_seconds / stage_idle_seconds).

Needs root and iproute2; without them it prints why and exits 77, which ctest shows as skipped.
"""

import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from safetensors.numpy import load_file

SKIP = 77
BIN_DIR = os.environ.get("BATON_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
TOPOLOGY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "topology.sh")
RATE, RATE_BITS = "1gbit", 1e9
PREFIX = "baton-netns-"  # + pid: unique per run, so parallel ctest runs do not clash
HOSTS = {"c": "10.99.0.10", "s0": "10.99.0.11", "s1": "10.99.0.12"}
PORT, METRICS_PORT = 7000, 9401  # inside a fresh namespace every port is free
STEPS, MICRO_BATCHES = 4, 4


def run(cmd, timeout=300, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def die_with_parent():
    """preexec_fn: SIGKILL this child if the test dies (ip netns exec execs in place, so it carries over)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def skip_unless_possible(tag):
    if os.geteuid() != 0:
        print(f"SKIPPED: needs root to create network namespaces (running as uid {os.geteuid()})")
        sys.exit(SKIP)
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print(f"SKIPPED: no `{tool}` (iproute2) on PATH")
            sys.exit(SKIP)
    probe = subprocess.run(["ip", "netns", "add", f"{tag}-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIPPED: cannot create a network namespace: {probe.stderr.strip()}")
        sys.exit(SKIP)
    subprocess.run(["ip", "netns", "del", f"{tag}-probe"], check=True)


def write_job(work):
    """A small model whose activations are worth shaping (D = 256, 64 + 16 tokens), and its job."""
    config = {"_class_name": "Flux2Transformer2DModel", "attention_head_dim": 64, "axes_dims_rope": [16, 16, 16, 16],
              "eps": 1e-06, "guidance_embeds": True, "in_channels": 128, "joint_attention_dim": 256,
              "mlp_ratio": 3.0, "num_attention_heads": 4, "num_layers": 1, "num_single_layers": 1,
              "out_channels": None, "patch_size": 1, "rope_theta": 2000, "timestep_guidance_channels": 256}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    baton = os.path.join(BIN_DIR, "baton")
    run([baton, "init-weights", "--config", f"{work}/config.json", "--out", f"{work}/model", "--seed", "0"])
    run([baton, "synthetic-cache", "--config", f"{work}/config.json", "--out", f"{work}/cache", "--samples",
         str(MICRO_BATCHES * 2), "--grids", "8x8", "--text-len", "16", "--seed", "0"])
    job = os.path.join(work, "job.yaml")
    with open(job, "w") as f:
        f.write(f"model: {work}/model\ndataset: {work}/cache\nlora: {{rank: 8, alpha: 8, targets: all-linear}}\n"
                f"steps: {STEPS}\nbatch_size: {MICRO_BATCHES}\nmicro_batches: {MICRO_BATCHES}\nschedule: 1f1b\n"
                "recompute: false\nseed: 1\nthreads: 1\n")
    return job


def make_certs(work):
    """The two-host deployment's security, as deploy/README.md tells a user: `baton certs` for every host's
    address; each process gets its host's folder (mutual TLS), `baton` the client folder."""
    certs = os.path.join(work, "certs")
    run([os.path.join(BIN_DIR, "baton"), "certs", "--out", certs, "--hosts", ",".join(HOSTS.values())])
    return certs


def start_worker(ns, address, log, certs, model_root):
    """stage_worker inside namespace `ns`, reading models under `model_root`; returns once it printed LISTENING."""
    proc = subprocess.Popen(["ip", "netns", "exec", ns, os.path.join(BIN_DIR, "stage_worker"), "--listen", address,
                             "--tls_dir", os.path.join(certs, address.split(":")[0]), "--model_root", model_root, "--threads", "1", "--metrics", f"{address.split(':')[0]}:{METRICS_PORT}"], stdout=subprocess.PIPE, stderr=log, text=True,
                            preexec_fn=die_with_parent)
    line = proc.stdout.readline()
    if line.startswith("metrics:"):  # printed before LISTENING
        line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        proc.kill()
        raise AssertionError(f"stage_worker in {ns} did not start: {line!r} (log {log.name})")
    return proc


def link_bytes(tag):
    """Switch port → (bytes the host sent, bytes it received), from the switch's side of each veth."""
    ports = json.loads(run(["ip", "-j", "-s", "-n", f"{tag}-sw", "link", "show", "master", "br0"]).stdout)
    return {p["ifname"]: (p["stats64"]["rx"]["bytes"], p["stats64"]["tx"]["bytes"]) for p in ports}


def scrape_links(tag, stage):
    """Stage worker `stage`'s baton_link_* series as {(family, peer): value}, scraped inside its namespace."""
    url = f"http://{HOSTS[f's{stage}']}:{METRICS_PORT}/metrics"
    text = run(["ip", "netns", "exec", f"{tag}-s{stage}", sys.executable, "-c",
                "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())",
                url]).stdout
    out = {}
    for line in text.splitlines():
        if not line.startswith("baton_link_"):
            continue
        name, value = line.rsplit(" ", 1)
        family, labels = name.split("{", 1)
        peer = labels.split('peer="', 1)[1].split('"', 1)[0]
        out[(family, peer)] = float(value)
    return out


def report_measured(links):
    print("per link as each stage worker measured it (baton_link_*_total, whole run):")
    for stage, series in enumerate(links):
        for peer in sorted({p for _, p in series}):
            sent = series.get(("baton_link_sent_bytes_total", peer), 0)
            received = series.get(("baton_link_received_bytes_total", peer), 0)
            seconds = series.get(("baton_link_transfer_seconds_total", peer), 0)
            print(f"  stage {stage} <-> {peer:>11}: sent {sent / 1e6:7.3f} MB, received {received / 1e6:7.3f} MB, "
                  f"transfer {seconds:.4f} s")
    assert links[0].get(("baton_link_sent_bytes_total", "stage1"), 0) > 0, "stage 0 sent nothing to stage 1"
    assert links[0].get(("baton_link_transfer_seconds_total", "stage1"), 0) > 0, "no transfer time measured"


def read_log(run_dir):
    with open(os.path.join(run_dir, "train_log.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def assert_same_lora(loopback, netns):
    a = load_file(os.path.join(loopback, "lora.safetensors"))
    b = load_file(os.path.join(netns, "lora.safetensors"))
    assert sorted(a) == sorted(b), f"LoRA keys differ: {sorted(set(a) ^ set(b))}"
    differ = [k for k in a if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes()]
    assert not differ, f"{len(differ)} of {len(a)} LoRA tensors differ between loopback and namespaces: {differ[:5]}"
    losses = [r["loss"] for r in read_log(loopback)], [r["loss"] for r in read_log(netns)]
    assert losses[0] == losses[1], f"losses differ: loopback {losses[0]} vs namespaces {losses[1]}"
    return len(a)


def report(tag, before, after, loopback, netns):
    log, loop_log = read_log(netns), read_log(loopback)
    busy = [sum(r["stage_busy_seconds"][i] for r in log) for i in range(2)]
    idle = [sum(r["stage_idle_seconds"][i] for r in log) for i in range(2)]
    print(f"per link at {RATE} (bytes over the whole run of {STEPS} steps; transfer = bytes / rate):")
    for host in HOSTS:
        sent = after[host][0] - before[host][0]
        received = after[host][1] - before[host][1]
        print(f"  {host:>2}: sent {sent / 1e6:8.3f} MB ({sent * 8 / RATE_BITS:.4f} s), "
              f"received {received / 1e6:8.3f} MB ({received * 8 / RATE_BITS:.4f} s)")
    for i in range(2):
        print(f"  stage {i}: compute {busy[i]:.3f} s, idle {idle[i]:.3f} s over {STEPS} steps")
    step = statistics.median(r["step_seconds"] for r in log[1:])
    loop_step = statistics.median(r["step_seconds"] for r in loop_log[1:])
    print(f"  median step after the first: {step:.3f} s across namespaces, {loop_step:.3f} s on loopback")
    moved = sum(after[h][0] - before[h][0] for h in ("s0", "s1"))
    assert moved > 0, "no bytes crossed the stage workers' links: the job did not run over the namespaces"


def run_in_namespaces(tag, work, job):
    logs = [open(os.path.join(work, f"stage{i}.log"), "w") for i in range(2)]
    addresses = [f"{HOSTS[f's{i}']}:{PORT}" for i in range(2)]
    certs = make_certs(work)
    workers = [start_worker(f"{tag}-s{i}", addresses[i], logs[i], certs, work) for i in range(2)]
    try:
        for address in addresses:  # the coordinator's host sees each worker SERVING across the switch
            run(["ip", "netns", "exec", f"{tag}-c", os.path.join(BIN_DIR, "baton"), "health", address, "--service",
                 "baton.v1.StageService", "--tls-dir", os.path.join(certs, "client")])
        before = link_bytes(tag)
        start = time.monotonic()
        run(["ip", "netns", "exec", f"{tag}-c", os.path.join(BIN_DIR, "coordinator"), "--stages", "2", "--workers",
             ",".join(addresses), "--tls_dir", os.path.join(certs, HOSTS["c"]), "--job", job, "--output",
             f"{work}/netns"])
        seconds = time.monotonic() - start
        return before, link_bytes(tag), seconds, [scrape_links(tag, i) for i in range(2)]
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=10)


def main():
    tag = f"{PREFIX}{os.getpid()}"
    skip_unless_possible(tag)
    subprocess.run([TOPOLOGY, "reap", PREFIX], check=False)  # namespaces of runs killed by a timeout
    # SIGTERM/SIGINT (ctest, Ctrl-C) unwind through `finally`, which removes the namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = tempfile.mkdtemp(prefix="baton-netns-")
    try:
        job = write_job(work)
        start = time.monotonic()
        run([os.path.join(BIN_DIR, "coordinator"), "--stages", "2", "--job", job, "--output", f"{work}/loopback"])
        loop_seconds = time.monotonic() - start
        run([TOPOLOGY, "up", tag, RATE] + [f"{h}={ip}/24" for h, ip in HOSTS.items()])
        qdiscs = run(["ip", "netns", "exec", f"{tag}-sw", "tc", "qdisc", "show"]).stdout
        assert qdiscs.count("tbf") == len(HOSTS), f"expected a tbf qdisc on every switch port:\n{qdiscs}"
        before, after, netns_seconds, links = run_in_namespaces(tag, work, job)
        tensors = assert_same_lora(f"{work}/loopback", f"{work}/netns")
        print(f"LoRA ({tensors} tensors) and losses of {STEPS} steps equal bitwise; coordinator wall time: "
              f"namespaces {netns_seconds:.1f} s, loopback {loop_seconds:.1f} s (there including its workers' start)")
        report(tag, before, after, f"{work}/loopback", f"{work}/netns")
        report_measured(links)
    finally:
        subprocess.run([TOPOLOGY, "down", tag], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print("PASSED")


if __name__ == "__main__":
    main()
