"""A cut link (issue 25, part 2): stage workers in network namespaces, the stage 1 host's link taken down for a few
seconds mid-run (`ip link set ... down` on its switch port), then up again, with the coordinator's default flags.

Before, a push that failed during the cut (`recvmsg: Connection timed out`) was never reported: the stage waiting
for the answer sat out the whole 300 s wait and the error never named the link. Now a failed push ends the wait at
once and the step is redone; a push that hangs instead is the stall watch's (15 s by default). The test holds the
run to: it finishes, its LoRA equals the same job on loopback bit for bit (the redo changes nothing), the step that
saw the cut took at most the cut + the stall timeout + 10 s, and whatever the coordinator reported names stage 1's
side of the link. It prints the seconds from the cut to the first report and the step's duration.

Needs root and iproute2 (exit 77 = skipped otherwise), like test_two_hosts.py, whose helpers it uses.
"""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import shutil

import test_two_hosts as hosts

CUT_SECONDS = 6
STALL_TIMEOUT = 15  # the coordinator's default --stall_timeout_s
COORDINATOR_FLAGS = []  # test_outage.py sets a shorter stall timeout
STEPS = 40


def follow(stream, lines):
    """Appends (monotonic time, line) for each line the coordinator prints."""
    for line in stream:
        lines.append((time.monotonic(), line.rstrip()))


def last_step(run_dir):
    try:
        return max((r["step"] for r in hosts.read_log(run_dir) if "event" not in r), default=0)
    except (FileNotFoundError, ValueError):
        return 0


def run_with_cut(tag, work, job):
    addresses = [f"{hosts.HOSTS[f's{i}']}:{hosts.PORT}" for i in range(2)]
    certs = hosts.make_certs(work)
    logs = [open(os.path.join(work, f"stage{i}.log"), "w") for i in range(2)]
    workers = [hosts.start_worker(f"{tag}-s{i}", addresses[i], logs[i], certs, work) for i in range(2)]
    out = f"{work}/netns"
    lines = []
    coordinator = subprocess.Popen(
        ["ip", "netns", "exec", f"{tag}-c", os.path.join(hosts.BIN_DIR, "coordinator"), "--stages", "2", "--workers",
         ",".join(addresses), "--tls_dir", os.path.join(certs, hosts.HOSTS["c"]), "--job", job, "--output", out,
         *COORDINATOR_FLAGS],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=hosts.die_with_parent)
    reader = threading.Thread(target=follow, args=(coordinator.stdout, lines), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while last_step(out) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert last_step(out) >= 5, "the run did not reach step 5"
        cut_step = last_step(out) + 1
        hosts.run(["ip", "-n", f"{tag}-sw", "link", "set", "s1", "down"])
        cut = time.monotonic()
        time.sleep(CUT_SECONDS)
        hosts.run(["ip", "-n", f"{tag}-sw", "link", "set", "s1", "up"])
        rc = coordinator.wait(timeout=600)
        reader.join(timeout=10)
        assert rc == 0, f"coordinator exited {rc}:\n" + "\n".join(l for _, l in lines[-40:])
        return cut, cut_step, lines, out
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=10)


def main():
    tag = f"{hosts.PREFIX}{os.getpid()}"
    hosts.skip_unless_possible(tag)
    subprocess.run([hosts.TOPOLOGY, "reap", hosts.PREFIX], check=False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = tempfile.mkdtemp(prefix="baton-cut-")
    hosts.STEPS = STEPS
    try:
        job = hosts.write_job(work)
        hosts.run([os.path.join(hosts.BIN_DIR, "coordinator"), "--stages", "2", "--job", job, "--output",
                   f"{work}/loopback"], timeout=600)
        hosts.run([hosts.TOPOLOGY, "up", tag, hosts.RATE] + [f"{h}={ip}/24" for h, ip in hosts.HOSTS.items()])
        cut, cut_step, lines, out = run_with_cut(tag, work, job)
        tensors = hosts.assert_same_lora(f"{work}/loopback", out)
        log = hosts.read_log(out)
        step_seconds = max(r["step_seconds"] for r in log if "event" not in r and r["step"] >= cut_step)
        reports = [(t - cut, l) for t, l in lines if t >= cut and ("stage 1" in l or "link" in l)]
        print(f"link of stage 1 cut for {CUT_SECONDS} s at step {cut_step}; the slowest step from then took "
              f"{step_seconds:.1f} s (limit {CUT_SECONDS + STALL_TIMEOUT + 10} s)")
        if reports:
            print(f"first report {reports[0][0]:.1f} s after the cut: {reports[0][1]}")
        else:
            print("nothing was reported: the connections rode out the cut (TCP retransmitted once the link was up)")
        assert step_seconds <= CUT_SECONDS + STALL_TIMEOUT + 10, \
            f"a step took {step_seconds:.1f} s: the cut was waited out, not reported"
        for seconds, line in reports:
            assert seconds <= CUT_SECONDS + STALL_TIMEOUT + 5, f"reported {seconds:.1f} s after the cut: {line}"
        print(f"LoRA ({tensors} tensors) after the cut equals the loopback run bitwise")
    finally:
        subprocess.run([hosts.TOPOLOGY, "down", tag], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print("PASSED")


if __name__ == "__main__":
    main()
