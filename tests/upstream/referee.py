"""Shared helpers for the upstream referee tests (tests/upstream/test_*.py).

Each test script builds tiny random weights with the real upstream library (diffusers, transformers, peft,
tokenizers), runs Baton's binaries on the same files, and compares. Scripts use unittest so ctest sees one
pass/fail per script and the log names each failing case.
"""

import os
import subprocess
import tempfile

import torch

BIN_DIR = os.environ.get("BATON_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Referees run on one thread like the C++ tests: deterministic and fair on a 2-core CI machine.
torch.set_num_threads(1)


def baton(*args, check=True):
    """Runs build/bin/baton with `args`; returns the CompletedProcess (stdout/stderr as text)."""
    cmd = [os.path.join(BIN_DIR, "baton"), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


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
