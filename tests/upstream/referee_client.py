"""Runs one referee script (tests/upstream/test_*.py) in a child of the referee server (referee_server.py), or,
when no server listens on BATON_REFEREE_SOCKET, as its own process. Prints the script's output and exits with its
code either way. Imports nothing heavy: its own start-up is a few tens of milliseconds.

  referee_client.py tests/upstream/test_vae.py
"""

import json
import os
import socket
import sys

EXIT_MARK = b"@@referee-exit"


def run_alone(script):
    os.execv(sys.executable, [sys.executable, script])


def main(script):
    path = os.environ.get("BATON_REFEREE_SOCKET", "")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        print(f"referee client: no referee server on '{path}'; running {os.path.basename(script)} alone", flush=True)
        run_alone(script)
    request = {"script": os.path.abspath(script), "cwd": os.getcwd(), "env": dict(os.environ)}
    sock.sendall(json.dumps(request).encode() + b"\n")
    out = sys.stdout.buffer
    held = b""  # the last complete line and what follows it: the exit line may be among them
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        lines = (held + chunk).split(b"\n")
        if len(lines) > 2:
            out.write(b"\n".join(lines[:-2]) + b"\n")
            out.flush()
        held = b"\n".join(lines[-2:])
    lines = held.rstrip(b"\n").split(b"\n")
    last = lines[-1]
    if len(lines) > 1:
        out.write(b"\n".join(lines[:-1]) + b"\n")
    out.flush()
    if not last.startswith(EXIT_MARK):
        out.write(last + b"\n")
        print("referee client: the server closed the stream without an exit code", flush=True)
        return 1
    return int(last.split()[1])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} SCRIPT")
    sys.exit(main(sys.argv[1]))
