"""One Python process that imports torch, diffusers, transformers and peft once for all the referee tests.

Each referee (tests/upstream/test_*.py) is still its own ctest test with its own name and result, but instead of a
fresh interpreter that spends seconds importing the upstream libraries, it runs in a child forked from this server,
which imported every referee module (and so every library they use) before it listened. ctest starts the server as
the fixture `upstream.server` and stops it after the last referee; a referee whose server is not there runs on its
own (referee_client.py), so `python3 tests/upstream/test_vae.py` and `ctest -R upstream.vae` still work.

  referee_server.py start SOCKET   # returns once the server listens (or exits 1 saying why)
  referee_server.py stop SOCKET
Protocol: the client sends one JSON line {script, cwd, env}; the server forks a child whose stdout and stderr are the
connection, runs the script's unittest suite there, and ends the stream with a line "@@referee-exit CODE".
"""

import glob
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXIT_MARK = "@@referee-exit"
CHILD_TIMEOUT_S = 900  # a referee's own ctest TIMEOUT is 600 s; a child outliving its client is ended here
IDLE_EXIT_S = 1800     # a server nobody stopped ends on its own


def preload():
    """Imports every referee module (their imports are the upstream libraries); returns {script name: module}."""
    sys.path.insert(0, HERE)
    modules = {}
    for path in sorted(glob.glob(os.path.join(HERE, "test_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        modules[name] = importlib.import_module(name)
    return modules


def run_child(conn, request, modules):
    """In the forked child: the connection becomes stdout/stderr, the client's cwd and environment are taken, and
    the script's tests run as `python SCRIPT` would run them. Never returns."""
    code = 1
    try:
        os.dup2(conn.fileno(), 1)
        os.dup2(conn.fileno(), 2)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        name = os.path.splitext(os.path.basename(request["script"]))[0]
        module = modules[name]
        sys.argv = [request["script"]]
        print(f"referee {name}: run in a child of the referee server (upstream libraries imported once)", flush=True)
        program = unittest.main(module=module, argv=[request["script"]], exit=False)
        code = 0 if program.result.wasSuccessful() else 1
    except BaseException:  # noqa: BLE001 - whatever the script raised is the test's failure, printed
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve_one(conn, modules):
    with conn:
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                return
            line += chunk
        request = json.loads(line)
        if request.get("stop"):
            os.kill(os.getpid(), signal.SIGTERM)
            return
        pid = os.fork()
        if pid == 0:
            run_child(conn, request, modules)
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        status = None
        while status is None:
            done, status_word = os.waitpid(pid, os.WNOHANG)
            if done:
                status = status_word
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            else:
                time.sleep(0.05)
        code = os.waitstatus_to_exitcode(status)
        try:
            conn.sendall(f"\n{EXIT_MARK} {code}\n".encode())
        except OSError:
            pass  # the client went away (its ctest timeout); nothing to tell


def serve(path, ready_fd):
    modules = preload()
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    server.settimeout(IDLE_EXIT_S)
    os.write(ready_fd, f"listening on {path}, {len(modules)} referee modules imported\n".encode())
    os.close(ready_fd)
    signal.signal(signal.SIGTERM, lambda *_: (os.path.exists(path) and os.unlink(path), os._exit(0)))
    while True:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            break
        threading.Thread(target=serve_one, args=(conn, modules), daemon=True).start()
    os.unlink(path)


def start(path):
    read_fd, write_fd = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        os.close(read_fd)
        # Nothing of the caller's stays open here (ctest waits for its test's output pipe to close): the server's own
        # output goes to SOCKET.log.
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        try:
            serve(path, write_fd)
        except BaseException:  # noqa: BLE001 - the starter reads the reason through the pipe
            os.write(write_fd, ("failed: " + traceback.format_exc()).encode())
        os._exit(1)
    os.close(write_fd)
    t0 = time.monotonic()
    message = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        message += chunk
    text = message.decode(errors="replace")
    print(f"referee server: {text.strip() or 'exited before it listened'} ({time.monotonic() - t0:.1f} s)")
    return 0 if text.startswith("listening") else 1


def stop(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.sendall(b'{"stop": true}\n')
        print(f"referee server on {path}: stopped")
    except OSError as e:
        print(f"referee server on {path}: none to stop ({e})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit(f"usage: {sys.argv[0]} start|stop SOCKET")
    sys.exit(start(sys.argv[2]) if sys.argv[1] == "start" else stop(sys.argv[2]))
