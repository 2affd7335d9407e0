"""Every deployment manifest, held against the binaries it starts.

Parses deploy/compose/*.yml, deploy/k8s/*.yaml and deploy/systemd/*.service, and checks each process they
start: every flag exists in that binary's real `--help` (the built binaries are run), the container ports are
exactly the --listen and --metrics ports, health probes and healthchecks ask the --listen port for a service
that the real server reports SERVING (stage_worker and encoder_worker are started and asked), stage workers
reserve a GPU, Prometheus annotations name the --metrics port, and the coordinator's --workers list the
StatefulSet's stable DNS names in stage order.
"""

import os
import re
import shlex
import subprocess
import tempfile
import unittest

import yaml

BIN_DIR = os.environ.get("BATON_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
DEPLOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy")
SERVERS = ("coordinator", "stage_worker", "encoder_worker")


def help_flags(binary):
    """name -> default, from `binary --help` as Abseil prints it ("--stages (...); default: 2;")."""
    out = subprocess.run([os.path.join(BIN_DIR, binary), "--help"], capture_output=True, text=True).stdout
    flat = re.sub(r"\s+", " ", out)
    return {m.group(1): m.group(2) for m in re.finditer(r" --?([a-z_0-9]+) \(.*?\); default: (.*?);", flat)}


def client_flags(command):
    """Flag names of `baton COMMAND --help` ("  --service VALUE  ...")."""
    out = subprocess.run([os.path.join(BIN_DIR, "baton"), command, "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"^  --([a-z-0-9]+)", out, re.M))


def parse_flags(args, booleans):
    """['--a', 'x', '--b=y', '--flag'] -> {'a': 'x', 'b': 'y', 'flag': 'true'}; non-flag words are errors."""
    flags, i = {}, 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise AssertionError(f"stray argument {arg!r} in {args}")
        name, eq, value = arg[2:].partition("=")
        if not eq:
            if name in booleans:
                value = "true"
            else:
                i += 1
                value = args[i]
        flags[name] = value
        i += 1
    return flags


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def interpolate(text):
    """Compose's ${VAR:-default} / ${VAR:?message}: the default, or a stand-in for a required variable."""
    stand_in = {"BATON_WORKERS": "hostA:7000,hostB:7000"}
    return re.sub(r"\$\{(\w+)(?::[-?]([^}]*))?\}", lambda m: stand_in.get(m.group(1), m.group(2) or ""), text)


class Process:
    """One process a manifest starts, with what the manifest says around it."""

    def __init__(self, where, argv):
        self.where, self.binary, self.args = where, os.path.basename(argv[0]), [str(a) for a in argv[1:]]
        self.ports = None        # container ports (None: no container, e.g. systemd)
        self.probes = []         # (kind, port, service)
        self.gpu = False         # a GPU is reserved / limited for it
        self.metrics_annotation = None
        self.port_names = {}
        self.labels = {}         # pod labels (Kubernetes)

    def flags(self, booleans=()):
        return parse_flags(self.args, booleans)


def compose_processes(path):
    with open(path) as f:
        doc = yaml.safe_load(interpolate(f.read()))
    for name, svc in doc["services"].items():
        p = Process(f"{os.path.basename(path)}:{name}", svc["command"])
        p.ports = {int(str(spec).split(":")[-1].split("/")[0]) for spec in svc.get("ports", [])}
        test = svc.get("healthcheck", {}).get("test", [])
        if test:
            p.probes.append(("healthcheck", test[1:], None))
        devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        p.gpu = any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)
        yield p


def k8s_documents():
    for file in sorted(os.listdir(os.path.join(DEPLOY, "k8s"))):
        if file.endswith(".yaml") and file != "kustomization.yaml":
            with open(os.path.join(DEPLOY, "k8s", file)) as f:
                docs = list(yaml.safe_load_all(f))
            for doc in docs:
                yield file, doc


def k8s_processes():
    for file, doc in k8s_documents():
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        template = doc["spec"]["template"]
        for c in template["spec"]["containers"]:
            p = Process(f"{file}:{doc['metadata']['name']}/{c['name']}", c["command"] + c.get("args", []))
            p.ports = {cp["containerPort"] for cp in c.get("ports", [])}
            p.port_names = {cp["name"]: cp["containerPort"] for cp in c.get("ports", []) if "name" in cp}
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                if "grpc" in c.get(kind, {}):
                    p.probes.append((kind, c[kind]["grpc"]["port"], c[kind]["grpc"].get("service", "")))
                if "exec" in c.get(kind, {}):  # `baton health ...` like a compose healthcheck
                    p.probes.append(("healthcheck", c[kind]["exec"]["command"], None))
            p.gpu = int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) >= 1
            p.labels = template.get("metadata", {}).get("labels", {})
            annotations = template.get("metadata", {}).get("annotations", {})
            if annotations.get("prometheus.io/scrape") == "true":
                p.metrics_annotation = int(annotations["prometheus.io/port"])
            yield p


def systemd_processes():
    folder = os.path.join(DEPLOY, "systemd")
    for file in sorted(os.listdir(folder)):
        with open(os.path.join(folder, file)) as f:
            lines = f.readlines()
        for line in lines:
            if line.startswith("ExecStart="):
                # %i: the instance (GPU index) of a template unit; 0 stands for any.
                yield Process(file, shlex.split(line[len("ExecStart="):].replace("%i", "0")))


def all_processes():
    compose = os.path.join(DEPLOY, "compose")
    for file in sorted(os.listdir(compose)):
        yield from compose_processes(os.path.join(compose, file))
    yield from k8s_processes()
    yield from systemd_processes()


class RunningServer:
    """A real server on a free loopback port, for asking its health service."""

    def __init__(self, argv, client_tls):
        self.client_tls = client_tls
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("LISTENING"):
            self.proc.kill()
            raise AssertionError(f"{argv} did not start: {line!r}")
        self.address = line.split()[1]

    def serving(self, service):
        cmd = [os.path.join(BIN_DIR, "baton"), "health", self.address, "--service", service, "--tls-dir",
               self.client_tls]
        return subprocess.run(cmd, capture_output=True, text=True).returncode == 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


class ManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.processes = list(all_processes())
        cls.flags = {b: help_flags(b) for b in SERVERS}
        cls.booleans = {b: {n for n, d in f.items() if d in ("true", "false")} for b, f in cls.flags.items()}

    def test_found_every_role(self):
        roles = {(p.where.split(":")[0].split(".")[-1], p.binary) for p in self.processes}
        for kind in ("yml", "yaml", "service"):
            self.assertTrue({"stage_worker", "encoder_worker"} <= {b for k, b in roles if k == kind}, roles)
        for kind in ("yml", "yaml"):
            self.assertIn((kind, "coordinator"), roles)

    def test_every_flag_exists_in_the_binary(self):
        for b in SERVERS:
            self.assertTrue(self.flags[b], f"{b} --help lists no flags")
        for p in self.processes:
            self.assertIn(p.binary, SERVERS, p.where)
            for flag in p.flags(self.booleans[p.binary]):
                self.assertIn(flag, self.flags[p.binary], f"{p.where}: {p.binary} has no --{flag}")

    def test_every_server_uses_tls(self):
        """Mutual TLS everywhere (deploy/README.md "Security"): every server gets a --tls_dir, never --insecure,
        every `baton health` probe a --tls-dir, and a coordinator that serves the job service its --token_file."""
        for p in self.processes:
            flags = p.flags(self.booleans[p.binary])
            self.assertIn("tls_dir", flags, f"{p.where}: no --tls_dir")
            self.assertNotIn("insecure", flags, p.where)
            if p.binary == "coordinator" and "listen" in flags:
                self.assertIn("token_file", flags, f"{p.where}: the job service needs --token_file")
            for kind, target, _ in p.probes:
                if kind == "healthcheck":
                    self.assertIn("--tls-dir", target, f"{p.where}: {target}")

    def test_container_ports_are_the_listen_and_metrics_ports(self):
        for p in self.processes:
            if p.ports is None:
                continue
            flags = p.flags(self.booleans[p.binary])
            self.assertIn("listen", flags, f"{p.where}: a server in a container must --listen")
            want = {port_of(flags[f]) for f in ("listen", "metrics") if f in flags}
            self.assertEqual(p.ports, want, f"{p.where}: container ports vs --listen/--metrics")
            self.assertTrue(flags["listen"].startswith("0.0.0.0:"), f"{p.where}: loopback is unreachable from outside")
            if p.port_names:
                self.assertEqual(p.port_names.get("grpc"), port_of(flags["listen"]), p.where)
                if "metrics" in flags:
                    self.assertEqual(p.port_names.get("metrics"), port_of(flags["metrics"]), p.where)
            if p.metrics_annotation is not None:
                self.assertEqual(p.metrics_annotation, port_of(flags["metrics"]), f"{p.where}: prometheus.io/port")

    def test_probes_ask_the_listen_port(self):
        baton_health = client_flags("health")
        self.assertIn("service", baton_health)
        for p in self.processes:
            if p.ports is None:
                continue
            self.assertTrue(p.probes, f"{p.where}: no health probe")
            listen = port_of(p.flags(self.booleans[p.binary])["listen"])
            for kind, target, service in self.probe_targets(p, baton_health):
                self.assertEqual(target, listen, f"{p.where} {kind}: probes port {target}, serves on {listen}")

    @staticmethod
    def probe_targets(p, baton_health):
        """(kind, port, service) of each probe; a compose healthcheck must be `baton health ADDR [--service S]`."""
        for kind, target, service in p.probes:
            if kind != "healthcheck":
                yield kind, target, service
                continue
            assert target[:2] == ["baton", "health"], f"{p.where}: healthcheck {target} is not `baton health`"
            flags = parse_flags(target[3:], {"insecure"})
            assert set(flags) <= baton_health, f"{p.where}: baton health has no {set(flags) - baton_health}"
            yield kind, port_of(target[2]), flags.get("service", "")

    def test_probed_services_are_served(self):
        wanted = {b: set() for b in SERVERS}
        baton_health = client_flags("health")
        for p in self.processes:
            for _, _, service in self.probe_targets(p, baton_health):
                wanted[p.binary].add(service)
        self.assertTrue(wanted["stage_worker"] and wanted["encoder_worker"] and wanted["coordinator"])
        with tempfile.TemporaryDirectory(prefix="baton-deploy-") as tmp:
            subprocess.run([os.path.join(BIN_DIR, "baton"), "init-weights", "--pipeline", "tiny", "--out",
                            f"{tmp}/pipeline"], check=True, capture_output=True)
            subprocess.run([os.path.join(BIN_DIR, "baton"), "certs", "--out", f"{tmp}/certs", "--hosts", "127.0.0.1"],
                           check=True, capture_output=True)
            tls = ["--tls_dir", f"{tmp}/certs/127.0.0.1"]
            argv = {"stage_worker": ["--listen", "127.0.0.1:0"] + tls,
                    "encoder_worker": ["--model", f"{tmp}/pipeline", "--listen", "127.0.0.1:0", "--threads", "1"] + tls,
                    "coordinator": ["--listen", "127.0.0.1:0", "--stages", "1", "--output", f"{tmp}/jobs",
                                    "--token_file", f"{tmp}/certs/token"] + tls}
            for binary in SERVERS:
                if "listen" not in self.flags[binary]:
                    print(f"note: {binary} has no --listen in this branch; its probes {wanted[binary]} are unchecked")
                    continue
                server = RunningServer([os.path.join(BIN_DIR, binary)] + argv[binary], f"{tmp}/certs/client")
                try:
                    for service in sorted(wanted[binary]):
                        self.assertTrue(server.serving(service), f"{binary} does not report {service!r} SERVING")
                    self.assertFalse(server.serving("baton.v1.NoSuchService"))
                finally:
                    server.stop()

    def test_stage_workers_reserve_a_gpu(self):
        for p in self.processes:
            if p.binary == "stage_worker":
                self.assertTrue(p.flags(self.booleans[p.binary])["device"].startswith("cuda"), p.where)
                if p.ports is not None:
                    self.assertTrue(p.gpu, f"{p.where}: no GPU reservation/limit")
            elif p.ports is not None:
                self.assertFalse(p.gpu, f"{p.where}: only stage workers need a GPU")

    def test_coordinator_lists_the_statefulset_in_stage_order(self):
        docs = list(k8s_documents())
        sets = [d for _, d in docs if d["kind"] == "StatefulSet"]
        self.assertEqual(len(sets), 1)
        sts = sets[0]
        service = next(d for _, d in docs if d["kind"] == "Service" and d["metadata"]["name"] == sts["spec"]["serviceName"])
        self.assertEqual(service["spec"].get("clusterIP"), "None", "the StatefulSet's Service must be headless")
        replicas = sts["spec"]["replicas"]
        worker = next(p for p in k8s_processes() if p.binary == "stage_worker")
        port = port_of(worker.flags(self.booleans["stage_worker"])["listen"])
        coordinator = next(p for p in k8s_processes() if p.binary == "coordinator")
        flags = coordinator.flags(self.booleans["coordinator"])
        want = [f"{sts['metadata']['name']}-{i}.{service['metadata']['name']}:{port}" for i in range(replicas)]
        self.assertEqual(flags["workers"].split(","), want)
        self.assertEqual(int(flags["stages"]), replicas)
        # Every Service port targets a named container port of the pods it selects.
        for _, d in docs:
            if d["kind"] != "Service":
                continue
            pods = [p for p in k8s_processes() if d["spec"]["selector"].items() <= p.labels.items()]
            self.assertTrue(pods, f"Service {d['metadata']['name']} selects no pod")
            for sp in d["spec"]["ports"]:
                self.assertTrue(any(sp["targetPort"] in p.port_names for p in pods), (d["metadata"]["name"], sp))


if __name__ == "__main__":
    unittest.main(verbosity=2)
