"""Debian's real Prometheus scrapes a live 2-stage Baton job (prometheus_fixture.LiveJob) through
deploy/prometheus/prometheus.yml, and its HTTP API shows every required series, moving: steps rise, links carry
bytes, every stage computes, loss is finite, every process reports its memory. Also `promtool check` on the
shipped config and rules, and the rules' recorded series computed from the live job.
"""
import os
import re
import subprocess
import sys
import time
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prometheus_fixture import JOB_NAME, PROMETHEUS_DIR, LiveJob, fail, find_prometheus, is_finite  # noqa: E402

HISTOGRAM = ("_bucket", "_sum", "_count")
# Families each kind of process must expose (core/metrics/families.h). baton_rpc_errors_total appears with
# the first failed RPC and baton_device_memory_allocated_bytes only on CUDA, so neither is required here.
REQUIRED = {
    "coordinator": ["baton_steps_completed_total", "baton_step", "baton_steps_target", "baton_loss",
                    "baton_learning_rate", "baton_gradient_norm", "baton_samples_per_second",
                    "baton_checkpoint_last_success_timestamp_seconds", "baton_stage_up", "baton_validation_loss",
                    "baton_sample_seconds", "baton_sample_images_total"]
    + [f"baton_step_duration_seconds{s}" for s in HISTOGRAM]
    + [f"baton_checkpoint_duration_seconds{s}" for s in HISTOGRAM],
    "stage_worker": ["baton_stage_forward_seconds_total", "baton_stage_backward_seconds_total",
                     "baton_stage_idle_seconds_total", "baton_microbatches_in_flight", "baton_worker_configured",
                     "baton_link_sent_bytes_total", "baton_link_received_bytes_total",
                     "baton_link_transfer_seconds_total"],
    "encoder_worker": ["baton_encoder_samples_encoded_total", "baton_encoder_samples_kept_total",
                       "baton_encoder_samples_failed_total"]
    + [f"baton_encoder_sample_seconds{s}" for s in HISTOGRAM],
}
EVERY_PROCESS = ["baton_process_resident_memory_bytes", "baton_build_info"]
SAMPLE_IMAGES = 8  # data/sample


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, ok, message):
        print(f"  {'ok  ' if ok else 'FAIL'} {message}", flush=True)
        if not ok:
            self.failures.append(message)


def check_promtool(check):
    _, promtool = find_prometheus()
    for args in (["check", "config", os.path.join(PROMETHEUS_DIR, "prometheus.yml")],
                 ["check", "rules", os.path.join(PROMETHEUS_DIR, "rules", "baton.rules.yml")]):
        r = subprocess.run([promtool] + args, capture_output=True, text=True)
        check.expect(r.returncode == 0, f"promtool {' '.join(args[:2])}: {(r.stdout + r.stderr).strip()}")


def check_targets(job, targets, check):
    kinds = sorted((t["labels"].get("baton_process", "?"), t["labels"].get("stage", "")) for t in targets)
    check.expect(kinds == [("coordinator", ""), ("encoder_worker", ""), ("stage_worker", "0"),
                           ("stage_worker", "1")], f"targets: {kinds}")
    # The coordinator prints `metrics: coordinator H:P, stage 0 H:P1, ...`; Prometheus scrapes exactly those.
    printed = re.search(r"^metrics: (.*)$", job.log_tail("coordinator", 10000), re.M)
    check.expect(printed is not None, "coordinator printed its 'metrics:' line")
    if printed:
        addresses = sorted(re.findall(r"(\S+:\d+)", printed.group(1)))
        scraped = sorted(t["labels"]["instance"] for t in targets
                         if t["labels"].get("baton_process") != "encoder_worker")
        check.expect(addresses == scraped, f"printed {addresses} = scraped {scraped}")


def check_families(prom, check):
    present = {}
    for r in prom.query('count by (__name__, baton_process) ({__name__=~"baton_.+"})'):
        present.setdefault(r["metric"].get("baton_process"), set()).add(r["metric"]["__name__"])
    for kind, names in REQUIRED.items():
        missing = [n for n in names + EVERY_PROCESS if n not in present.get(kind, set())]
        check.expect(not missing, f"{kind}: {len(names + EVERY_PROCESS)} required families"
                     + (f", missing {missing}" if missing else ""))
    # honor_labels: Baton's job label (the job file's stem) stays `job`, not `exported_job`.
    job_labels = list(prom.values('count by (job, exported_job) ({__name__=~"baton_step|baton_stage_.+"})'))
    check.expect(job_labels == [f'{{job="{JOB_NAME}"}}'], f"job labels of coordinator and stage series: {job_labels}")


def check_moving(job, check):
    prom = job.prom
    first = prom.values("max(baton_steps_completed_total)")
    forward = prom.values("sum by (stage) (baton_stage_forward_seconds_total)")
    time.sleep(3)
    second = prom.values("max(baton_steps_completed_total)")
    step1, step2 = next(iter(first.values())), next(iter(second.values()))
    check.expect(step2 > step1, f"steps rise: {step1:.0f} -> {step2:.0f} in 3 s")
    forward2 = prom.values("sum by (stage) (baton_stage_forward_seconds_total)")
    check.expect(len(forward2) == 2 and all(forward2[k] > forward.get(k, 0) for k in forward2),
                 f"forward seconds rise per stage: {forward} -> {forward2}")
    for stage, other in (("0", "1"), ("1", "0")):
        for name in ("baton_link_sent_bytes_total", "baton_link_received_bytes_total",
                     "baton_link_transfer_seconds_total"):
            v = prom.values(f'sum({name}{{stage="{stage}", peer="stage{other}"}})')
            x = next(iter(v.values()), 0.0)
            check.expect(x > 0, f"stage {stage} <-> stage{other}: {name} = {x:g}")
        for name in ("baton_stage_forward_seconds_total", "baton_stage_backward_seconds_total"):
            x = next(iter(prom.values(f'sum({name}{{stage="{stage}"}})').values()), 0.0)
            check.expect(x > 0, f"stage {stage}: {name} = {x:.3f}")
        up = prom.values(f'baton_stage_up{{stage="{stage}"}}')
        check.expect(list(up.values()) == [1.0], f"stage {stage}: baton_stage_up = {list(up.values())}")
        configured = prom.values(f'baton_worker_configured{{stage="{stage}"}}')
        check.expect(list(configured.values()) == [1.0],
                     f"stage {stage}: baton_worker_configured = {list(configured.values())}")


def check_values(job, check):
    prom = job.prom
    for name in ("baton_loss", "baton_gradient_norm", "baton_learning_rate", "baton_samples_per_second"):
        v = list(prom.values(name).values())
        check.expect(len(v) == 1 and is_finite(v[0]) and v[0] > 0, f"{name} = {v}")
    # The job validates at timesteps 0.1, 0.5, 0.9 and renders one sample image before its first step.
    validation = prom.values("baton_validation_loss")
    check.expect(sorted(re.findall(r'timestep="([^"]+)"', " ".join(validation))) == ["0.1", "0.5", "0.9", "mean"]
                 and all(is_finite(x) and x > 0 for x in validation.values()), f"baton_validation_loss: {validation}")
    images = list(prom.values("baton_sample_images_total").values())
    seconds = list(prom.values("baton_sample_seconds").values())
    check.expect(images == [1.0] and len(seconds) == 1 and is_finite(seconds[0]) and seconds[0] > 0,
                 f"baton_sample_images_total = {images}, baton_sample_seconds = {seconds}")
    memory = prom.values("baton_process_resident_memory_bytes")
    check.expect(len(memory) == 4 and all(x > 1e6 for x in memory.values()),
                 "resident memory of 4 processes: " + ", ".join(f"{x / 2**20:.0f} MiB" for x in memory.values()))
    info = prom.values("count by (process) (baton_build_info == 1)")
    check.expect(sorted(info) == ['{process="coordinator"}', '{process="encoder_worker"}',
                                  '{process="stage_worker"}'], f"baton_build_info: {info}")
    encoded = prom.values("sum(baton_encoder_samples_encoded_total) + sum(baton_encoder_samples_kept_total)")
    failed = prom.values("sum(baton_encoder_samples_failed_total)")
    check.expect(list(encoded.values()) == [SAMPLE_IMAGES] and list(failed.values()) == [0.0],
                 f"encoder: {list(encoded.values())} samples encoded or kept, {list(failed.values())} failed")
    stamp = list(prom.values("baton_checkpoint_last_success_timestamp_seconds").values())
    check.expect(len(stamp) == 1 and job.start_time <= stamp[0] <= time.time() + 1,
                 f"last checkpoint {time.time() - stamp[0]:.1f} s ago" if stamp else "no checkpoint time")


def check_rules(job, check):
    """Every recording rule of deploy/prometheus/rules/ yields finite data from the live job, every rule
    evaluates without error, and no alert fires on a healthy run."""
    with open(os.path.join(PROMETHEUS_DIR, "rules", "baton.rules.yml")) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    for rule in rules:
        if "record" in rule:
            v = job.wait_value(f"recorded {rule['record']}", rule["record"], is_finite, 20)
            check.expect(True, f"{rule['record']}: " + ", ".join(f"{x:.4g}" for x in v.values()))
    busy = job.prom.values("job_stage:baton_stage_busy:ratio_rate1m")
    check.expect(len(busy) == 2 and all(0 < x <= 1.05 for x in busy.values()),
                 f"busy ratio of both stages in (0, 1]: {list(busy.values())}")
    loaded = [r for g in job.prom.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
    bad = [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"]
    firing = [r["name"] for r in loaded if r.get("state") == "firing"]
    check.expect(len(loaded) == len(rules) and not bad and not firing,
                 f"{len(loaded)} rules loaded, evaluation errors {bad}, firing {firing}")


def print_scrapes(targets):
    """A scrape of each process, as Prometheus reads it (the first samples of each)."""
    for t in sorted(targets, key=lambda t: t["scrapeUrl"]):
        with urllib.request.urlopen(t["scrapeUrl"], timeout=5) as r:
            lines = [ln for ln in r.read().decode().splitlines() if ln.startswith("baton_")]
        print(f"--- {t['labels'].get('baton_process')} {t['labels'].get('stage', '')} {t['scrapeUrl']}: "
              f"{len(lines)} samples")
        for ln in lines[:12]:
            print(f"    {ln}")


def main():
    started = time.monotonic()
    check = Checks()
    check_promtool(check)
    with LiveJob("prometheus") as job:
        targets = job.wait_all_up()
        job.wait_training()
        print(f"job training, all targets up after {time.monotonic() - started:.1f} s")
        check_targets(job, targets, check)
        check_families(job.prom, check)
        check_moving(job, check)
        check_values(job, check)
        check_rules(job, check)
        print_scrapes(targets)
        if check.failures:
            fail(f"{len(check.failures)} checks failed: {check.failures}")
    print(f"PASS in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
