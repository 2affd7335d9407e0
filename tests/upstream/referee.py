"""Shared helpers for the upstream referee tests (tests/upstream/test_*.py).

Each test script builds tiny random weights with the real upstream library (diffusers, transformers, peft,
tokenizers), runs Baton's binaries on the same files, and compares. Scripts use unittest so ctest sees one
pass/fail per script and the log names each failing case.
"""

import atexit
import json
import os
import select
import subprocess
import tempfile

import torch

BIN_DIR = os.environ.get("BATON_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Referees run on one thread like the C++ tests: deterministic and fair on a 2-core CI machine.
torch.set_num_threads(1)


# `baton command-server` (tools/command_server.h): one baton process per test script runs every command it asks for,
# so a script pays the process start and libtorch's load once, not per call (hundreds of calls in all). The commands
# run exactly as `baton ARGS` would; BATON_REFEREE_FRESH_PROCESS=1 runs each in a process of its own instead.
_server = None
_SERVER_TIMEOUT = 300


def _stop_server():
    if _server is not None and _server.poll() is None:
        _server.stdin.close()
        _server.wait(timeout=30)


atexit.register(_stop_server)


def _run_in_server(cmd):
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([cmd[0], "command-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
    with tempfile.TemporaryDirectory(prefix="baton-cmd-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        _server.stdin.write(json.dumps({"args": cmd[1:], "stdout": out, "stderr": err}) + "\n")
        _server.stdin.flush()
        ready, _, _ = select.select([_server.stdout], [], [], _SERVER_TIMEOUT)
        if not ready:
            _server.kill()
            raise subprocess.TimeoutExpired(cmd, _SERVER_TIMEOUT)
        line = _server.stdout.readline()
        if not line:  # the command took the process down (a crash): its code, as a fresh process would give it
            rc = _server.wait()
        else:
            rc = json.loads(line)["rc"]
        return subprocess.CompletedProcess(cmd, rc, _read_text(out), _read_text(err))


def _read_text(path):
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()


def baton(*args, check=True):
    """Runs build/bin/baton with `args`; returns the CompletedProcess (stdout/stderr as text)."""
    cmd = [os.path.join(BIN_DIR, "baton"), *map(str, args)]
    if os.environ.get("BATON_REFEREE_FRESH_PROCESS"):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    else:
        proc = _run_in_server(cmd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def assert_job_refused(test, tmp, body, want):
    """A job of `body`'s keys (from its 4th line, after model, dataset and steps) is refused by the job parser with
    `want` at JOB:4 (`baton lr-schedule` loads it as every command does)."""
    job = os.path.join(tmp, "bad.yaml")
    with open(job, "w") as f:
        f.write(f"model: m\ndataset: d\nsteps: 5\n{body}\n")
    proc = baton("lr-schedule", "--job", job, check=False)
    test.assertEqual(proc.returncode, 1, body)
    test.assertIn(f"{job}:4: {want}", proc.stderr, body)


def temp_dir():
    """A temporary directory removed when the returned object is garbage-collected or cleaned up."""
    return tempfile.TemporaryDirectory(prefix="baton-upstream-")


def max_rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a - e| / max |e|: the relative error used by every referee tolerance."""
    actual = actual.double()
    expected = expected.double()
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def roughen_wan_vae(vae):
    """Makes a random AutoencoderKLWan's RMS-norm gammas 1 + N(0, 0.1²) and its conv biases + N(0, 0.05²): the
    defaults (1 and diffusers' small init) would hide a wrong norm axis or a dropped bias. Returns `vae`."""
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.add_(0.05 * torch.randn_like(p))
    return vae
