"""Two data-parallel replicas of a 2-stage pipeline on four hosts: the coordinator and four stage workers in five
network namespaces on one switch (tests/netns/topology.sh), every link shaped to 1 Gbit/s both ways, mutual TLS
from `baton certs`. `coordinator --stages 2 --workers @cluster.txt` (one line per replica: r0s0 r0s1, then r1s0,r1s1;
the file gives the replica count) with replica_split: equal (so
each replica runs 2 of the 4 micro-batches every step) must give, bit for bit, the LoRA and losses of the same job
with 2 replicas on loopback. The report gives the bytes each host's link carried: the coordinator's carries every
replica's gradients and new adapters (they meet there), the stages' links their activations. Then the same job with
`replica_exchange: allreduce` over the same namespaces: matching stages sum their gradients over c10d Gloo groups,
worker to worker, and step AdamW themselves; the LoRA and losses are again the loopback run's bit for bit, and the
coordinator's link carries less than with the coordinator exchange.

Needs root and iproute2; without them it prints why and exits 77, which ctest shows as skipped.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_two_hosts as two  # noqa: E402  (the same job, certificates, worker start and checks)

HOSTS = {"c": "10.98.0.10", "r0s0": "10.98.0.11", "r0s1": "10.98.0.12", "r1s0": "10.98.0.13", "r1s1": "10.98.0.14"}
WORKERS = ["r0s0", "r0s1", "r1s0", "r1s1"]  # replica 0's stages, then replica 1's (the --workers order)
PREFIX = "baton-netns-rep-"


def run_in_namespaces(tag, work, job, certs, out):
    addresses = [f"{HOSTS[h]}:{two.PORT}" for h in WORKERS]
    logs = [open(os.path.join(work, f"{h}.log"), "w") for h in WORKERS]
    workers = [two.start_worker(f"{tag}-{h}", a, log, certs, work) for h, a, log in zip(WORKERS, addresses, logs)]
    cluster = os.path.join(work, "cluster.txt")  # the cluster-file form: one line per replica, the count from it
    with open(cluster, "w") as f:
        f.write("# replica 0: two cards\n" + " ".join(addresses[:2]) + "\n" + ",".join(addresses[2:]) + "\n")
    try:
        before = two.link_bytes(tag)
        two.run(["ip", "netns", "exec", f"{tag}-c", os.path.join(two.BIN_DIR, "coordinator"), "--stages", "2",
                 "--workers", f"@{cluster}", "--tls_dir", os.path.join(certs, HOSTS["c"]),
                 "--job", job, "--output", f"{work}/{out}"])
        return before, two.link_bytes(tag)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=20)  # a stopped worker exits within its 8 s shutdown grace


def main():
    tag = f"{PREFIX}{os.getpid()}"
    two.skip_unless_possible(tag)
    subprocess.run([two.TOPOLOGY, "reap", PREFIX], check=False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = tempfile.mkdtemp(prefix="baton-netns-rep-")
    two.HOSTS = HOSTS  # start_worker binds its metrics to the host's address
    try:
        job = two.write_job(work)
        with open(job, "a") as f:
            f.write("replica_split: equal\n")
        two.run([os.path.join(two.BIN_DIR, "coordinator"), "--stages", "2", "--replicas", "2", "--job", job,
                 "--output", f"{work}/loopback"])
        two.run([two.TOPOLOGY, "up", tag, two.RATE] + [f"{h}={ip}/24" for h, ip in HOSTS.items()])
        qdiscs = two.run(["ip", "netns", "exec", f"{tag}-sw", "tc", "qdisc", "show"]).stdout
        assert qdiscs.count("tbf") == len(HOSTS), f"expected a tbf qdisc on every switch port:\n{qdiscs}"
        certs = os.path.join(work, "certs")
        two.run([os.path.join(two.BIN_DIR, "baton"), "certs", "--out", certs, "--hosts", ",".join(HOSTS.values())])
        carried = {}
        for exchange in ("coordinator", "allreduce"):
            exchange_job = os.path.join(work, f"job_{exchange}.yaml")
            with open(job) as src, open(exchange_job, "w") as f:
                f.write(src.read() + f"replica_exchange: {exchange}\n")
            before, after = run_in_namespaces(tag, work, exchange_job, certs, f"netns_{exchange}")
            tensors = two.assert_same_lora(f"{work}/loopback", f"{work}/netns_{exchange}")
            log = two.read_log(f"{work}/netns_{exchange}")
            splits = {tuple(r["replica_micro_batches"]) for r in log}
            assert splits == {(2, 2)}, f"expected every step split 2 + 2, got {splits}"
            print(f"2 replicas x 2 stages across namespaces, replica_exchange: {exchange}: LoRA ({tensors} tensors) and "
                  f"losses of {two.STEPS} steps equal the loopback run's bitwise; every step split 2 + 2")
            print(f"per link at {two.RATE} over {two.STEPS} steps:")
            for host in HOSTS:
                sent, received = (after[host][k] - before[host][k] for k in (0, 1))
                print(f"  {host:>4}: sent {sent / 1e6:8.3f} MB, received {received / 1e6:8.3f} MB")
                assert host == "c" or sent > 0, f"{host} sent nothing: the job did not run over the namespaces"
            carried[exchange] = sum(after["c"][k] - before["c"][k] for k in (0, 1))
        assert carried["allreduce"] < carried["coordinator"], f"the coordinator's link carried {carried}"
    finally:
        subprocess.run([two.TOPOLOGY, "down", tag], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print("PASSED")


if __name__ == "__main__":
    main()
