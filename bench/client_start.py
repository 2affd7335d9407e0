"""What a job command and the browser view cost now that `baton` links no libtorch (issue 45): the start-to-exit time
of `baton list` against a live job service (`coordinator --listen`), beside the same wait for `baton-tools --commands`
(a libtorch process that does nothing: the least any command cost when `baton` loaded libtorch); and the resident
memory of an idle `baton ui` that has served a page, beside an idle `baton-tools command-server`.

    python3 bench/client_start.py [--runs 20]

The last line is one JSON object."""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin")


def wait_for(path, pattern, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        with open(path) as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            sys.exit(f"{path}: the process ended before printing {pattern}")
        time.sleep(0.05)
    sys.exit(f"{path}: no {pattern} within {seconds} s")


def median_seconds(args, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
    return m.group(1).strip() if m else platform.machine()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


def spawn(args, log):
    return subprocess.Popen([os.path.join(BIN, args[0]), *args[1:]], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.PIPE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="baton-bench-client-") as d:
        log = os.path.join(d, "service.log")
        service = spawn(["coordinator", "--stages", "2", "--listen", "127.0.0.1:0", "--insecure", "--output",
                         os.path.join(d, "jobs")], log)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("bench-token\n")
        ui_log = os.path.join(d, "ui.log")
        ui = tools = None
        try:
            address = wait_for(log, r"LISTENING (\S+)", service).group(1)
            baton_list = median_seconds([os.path.join(BIN, "baton"), "list", "--coordinator", address, "--insecure"],
                                        runs)
            libtorch_noop = median_seconds([os.path.join(BIN, "baton-tools"), "--commands"], runs)
            ui = spawn(["baton", "ui", "--server", address, "--insecure", "--token-file", token, "--listen",
                        "127.0.0.1:0"], ui_log)
            url = "http://" + wait_for(ui_log, r"serving http://(\S+)/ ", ui).group(1)
            urllib.request.urlopen(url + "/login").read()
            time.sleep(1)
            ui_mb = rss_mb(ui.pid)
            tools = spawn(["baton-tools", "command-server"], os.path.join(d, "tools.log"))
            time.sleep(2)
            tools_mb = rss_mb(tools.pid)
        finally:
            for p in (ui, tools, service):
                if p is not None:
                    p.terminate()
                    p.wait()
    result = {"machine": cpu_model(), "cores": os.cpu_count(), "runs": runs,
              "baton_list_s": round(baton_list, 4), "libtorch_noop_s": round(libtorch_noop, 4),
              "start_ratio": round(libtorch_noop / baton_list, 1), "ui_idle_mb": round(ui_mb, 1),
              "libtorch_idle_mb": round(tools_mb, 1), "memory_ratio": round(tools_mb / ui_mb, 1)}
    print(f"baton list (no libtorch): {baton_list * 1000:.1f} ms; a libtorch process doing nothing: "
          f"{libtorch_noop * 1000:.1f} ms ({result['start_ratio']}x)")
    print(f"baton ui idle: {ui_mb:.1f} MB resident; an idle libtorch process: {tools_mb:.1f} MB "
          f"({result['memory_ratio']}x)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
