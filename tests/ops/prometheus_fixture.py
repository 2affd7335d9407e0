"""A live Baton job watched by Debian's real Prometheus, for the ops tests (test_prometheus_scrape.py,
test_grafana_dashboard.py).

LiveJob starts, on loopback and free ports:
  - /usr/bin/prometheus with a copy of deploy/prometheus/prometheus.yml (scrape and rule intervals cut to 1 s,
    storage in a temporary folder, rules read from deploy/prometheus/rules/);
  - `encoder_worker --listen` with --metrics, which the job asks to encode data/sample before training;
  - `coordinator --stages 2 --metrics 127.0.0.1:0` on a tiny FLUX.2 pipeline (`baton init-weights --pipeline
    tiny`), whose <output>/prometheus_targets.json goes into Prometheus' file_sd folder as the README says.
The job has far more steps than the tests need and is stopped (SIGTERM: checkpoint and stop) on exit.
Nothing is downloaded or installed; without prometheus the fixture fails and names scripts/setup.sh.
"""
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BATON_BIN_DIR", os.path.join(ROOT, "build", "bin"))
PROMETHEUS_DIR = os.path.join(ROOT, "deploy", "prometheus")
SCRAPE_INTERVAL_S = 1
PROCESSES = 4  # coordinator, stage 0, stage 1, encoder worker
JOB_STEPS = 100000  # never reached: the fixture stops the job
JOB_NAME = "observe"  # the job file's stem: Baton's `job` label


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def find_prometheus():
    for name in ("prometheus", "promtool"):
        if shutil.which(name) is None and not os.path.exists(f"/usr/bin/{name}"):
            fail(f"{name} is not installed: scripts/setup.sh installs Debian's prometheus package "
                 "(apt-get install prometheus); this test uses the real server and installs nothing itself")
    return shutil.which("prometheus") or "/usr/bin/prometheus", shutil.which("promtool") or "/usr/bin/promtool"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, timeout_s, interval_s=0.5, alive=None):
    """Polls check() until it returns a truthy value (returned) or fails after timeout_s naming `what`."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last = e
        else:
            if last:
                return last
        time.sleep(interval_s)
    fail(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Prometheus:
    """The HTTP API of a running Prometheus."""

    def __init__(self, base_url):
        self.base_url = base_url

    def get(self, path, **params):
        url = f"{self.base_url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        return body

    def query(self, expr, at=None):
        """Instant query: the result vector (list of {metric, value}); raises ValueError on a query error."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        body = self.get("/api/v1/query", **params)
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, expr, start, end, step_s):
        """Range query as a Grafana time series panel sends it: the result matrix; ValueError on a query error."""
        body = self.get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step_s}s")
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def values(self, expr, at=None):
        """{label-string: float} of an instant query."""
        return {label_string(r["metric"]): float(r["value"][1]) for r in self.query(expr, at)}

    def targets(self):
        return self.get("/api/v1/targets", state="active")["data"]["activeTargets"]


def label_string(metric):
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


class LiveJob:
    """Context manager: Prometheus plus a running 2-stage job and encoder worker (see the module comment)."""

    def __init__(self, name):
        self.prometheus_bin, self.promtool_bin = find_prometheus()
        self.tmp = tempfile.mkdtemp(prefix=f"baton-{name}-")
        self.procs = {}
        self.logs = {}
        self.start_time = None

    # --- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self):
        self.start_time = time.time()
        try:
            self._make_weights()
            self._start_prometheus()
            self._start_encoder_worker()
            self._start_coordinator()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        coordinator = self.procs.get("coordinator")
        if coordinator is not None and coordinator.poll() is None:
            coordinator.send_signal(signal.SIGTERM)  # checkpoints, stops its stage workers and exits
            try:
                coordinator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for name, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
        for f in self.logs.values():
            f.close()
        if exc_type is None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print(f"kept {self.tmp} (process logs in {self.tmp}/*.log)", flush=True)
        return False

    def _spawn(self, name, argv):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        self.logs[name] = log
        print("+ " + " ".join(argv), flush=True)
        # Own process group, so that cleanup signals only what we started; the coordinator's stage workers die
        # with it (PR_SET_PDEATHSIG, stage_driver/local_workers.h).
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, name, lines=30):
        self.logs[name].flush()
        with open(os.path.join(self.tmp, f"{name}.log")) as f:
            return "".join(f.readlines()[-lines:])

    def check_alive(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                fail(f"{name} exited with status {p.returncode}:\n{self.log_tail(name)}")

    # --- setup ---------------------------------------------------------------------------------------------
    def _make_weights(self):
        self.pipeline = os.path.join(self.tmp, "pipeline")
        subprocess.run([os.path.join(BIN, "baton"), "init-weights", "--pipeline", "tiny", "--out", self.pipeline,
                        "--seed", "0"], check=True, stdout=subprocess.DEVNULL)

    def prometheus_config(self):
        """deploy/prometheus/prometheus.yml as the test runs it: 1 s intervals, rules and targets by path."""
        with open(os.path.join(PROMETHEUS_DIR, "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"]["scrape_interval"] = f"{SCRAPE_INTERVAL_S}s"
        config["global"]["evaluation_interval"] = f"{SCRAPE_INTERVAL_S}s"
        config["rule_files"] = [os.path.join(PROMETHEUS_DIR, r) for r in config["rule_files"]]
        (scrape,) = [s for s in config["scrape_configs"] if s["job_name"] == "baton"]
        assert scrape.get("honor_labels") is True, "prometheus.yml: the baton scrape job needs honor_labels: true"
        (sd,) = scrape["file_sd_configs"]
        sd["files"] = [os.path.join(self.targets_dir, os.path.basename(p)) for p in sd["files"]]
        sd["refresh_interval"] = f"{SCRAPE_INTERVAL_S}s"
        return config

    def _start_prometheus(self):
        self.targets_dir = os.path.join(self.tmp, "prometheus", "targets")
        os.makedirs(self.targets_dir)
        config_path = os.path.join(self.tmp, "prometheus", "prometheus.yml")
        with open(config_path, "w") as f:
            yaml.safe_dump(self.prometheus_config(), f)
        port = free_port()
        self._spawn("prometheus", [
            self.prometheus_bin, f"--config.file={config_path}",
            f"--storage.tsdb.path={os.path.join(self.tmp, 'prometheus', 'data')}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"])
        self.prom = Prometheus(f"http://127.0.0.1:{port}")

        def ready():
            with urllib.request.urlopen(f"{self.prom.base_url}/-/ready", timeout=2) as r:
                return r.status == 200
        wait_until("prometheus /-/ready", ready, 30, alive=self.check_alive)

    def _certs(self):
        """`baton certs` for 127.0.0.1 (made once): the encoder worker and the coordinator talk mutual TLS."""
        certs = os.path.join(self.tmp, "certs")
        if not os.path.exists(certs):
            subprocess.run([os.path.join(BIN, "baton"), "certs", "--out", certs, "--hosts", "127.0.0.1"],
                           check=True, stdout=subprocess.DEVNULL)
        return os.path.join(certs, "127.0.0.1")

    def _start_encoder_worker(self):
        self.encoder_address = f"127.0.0.1:{free_port()}"
        self.encoder_metrics = f"127.0.0.1:{free_port()}"
        self._spawn("encoder_worker", [
            os.path.join(BIN, "encoder_worker"), "--model", self.pipeline, "--listen", self.encoder_address,
            "--tls_dir", self._certs(), "--metrics", self.encoder_metrics, "--cache_root", self.tmp, "--max_sequence_length", "128", "--threads", "1"])
        write_atomic(os.path.join(self.targets_dir, "encoder.json"), json.dumps(
            [{"targets": [self.encoder_metrics], "labels": {"baton_process": "encoder_worker"}}]))

    def _start_coordinator(self):
        self.output = os.path.join(self.tmp, "out")
        job_path = os.path.join(self.tmp, f"{JOB_NAME}.yaml")
        with open(job_path, "w") as f:
            f.write(f"""model: {self.pipeline}
dataset: {os.path.join(self.tmp, 'cache')}
encode: {{images: {os.path.join(ROOT, 'data', 'sample')}, encoder_worker: {self.encoder_address}, resolution: 128}}
lora: {{rank: 4, targets: all-linear}}
optimizer: {{lr: 1.0e-3, warmup_steps: 5}}
steps: {JOB_STEPS}
batch_size: 4
micro_batches: 4
schedule: 1f1b
seed: 1
checkpoint_every: 20
threads: 1
validation: {{every: 10, samples: 2, timesteps: [0.1, 0.5, 0.9]}}
samples: {{every: {JOB_STEPS}, prompts: [a red circle], steps: 2, size: [32, 32], seed: 0}}
""")
        self._spawn("coordinator", [
            os.path.join(BIN, "coordinator"), "--stages", "2", "--job", job_path, "--output", self.output,
            "--tls_dir", self._certs(), "--metrics", "127.0.0.1:0"])
        targets_file = os.path.join(self.output, "prometheus_targets.json")
        text = wait_until(f"{targets_file} (the coordinator writes it when started with --metrics)",
                          lambda: os.path.exists(targets_file) and open(targets_file).read(), 60,
                          alive=self.check_alive)
        json.loads(text)  # a malformed file fails here rather than as a silently ignored file_sd list
        write_atomic(os.path.join(self.targets_dir, "run.json"), text)

    # --- waiting on Prometheus -----------------------------------------------------------------------------
    def wait_all_up(self, timeout_s=60):
        def all_up():
            targets = self.prom.targets()
            return len(targets) == PROCESSES and all(t["health"] == "up" for t in targets) and targets
        return wait_until(f"{PROCESSES} Prometheus targets, all up", all_up, timeout_s, alive=self.check_alive)

    def wait_value(self, what, expr, predicate, timeout_s=60, series=None):
        """Waits until every sample of `expr` satisfies predicate, and there are `series` of them (default: at
        least one); returns {labels: value}."""
        def check():
            v = self.prom.values(expr)
            enough = len(v) == series if series is not None else bool(v)
            return v if enough and all(predicate(x) for x in v.values()) else None
        return wait_until(what, check, timeout_s, alive=self.check_alive)

    def wait_training(self, min_steps=8, scrapes=8):
        """Until every target is up, Prometheus has seen min_steps steps and a checkpoint, and the coordinator
        and both stages have been scraped `scrapes` times in the last scrapes + 2 seconds of training (so that
        every rate window of the tests and the dashboard holds several samples)."""
        self.wait_all_up()
        self.wait_value(f"baton_step >= {min_steps}", "max(baton_step)", lambda x: x >= min_steps, 90)
        self.wait_value("a successful checkpoint", "baton_checkpoint_last_success_timestamp_seconds",
                        lambda x: x > 0, 30)
        window = f"[{(scrapes + 2) * SCRAPE_INTERVAL_S}s]"
        counts = f"count_over_time(baton_step{window}) or count_over_time(baton_stage_forward_seconds_total{window})"
        self.wait_value(f"{scrapes} scrapes of the training coordinator and stages", counts,
                        lambda x: x >= scrapes, 30, series=3)


def is_finite(x):
    return not (math.isnan(x) or math.isinf(x))
