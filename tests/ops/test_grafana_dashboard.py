"""The Grafana dashboard (deploy/grafana/dashboards/baton-training.json) proven the way Grafana uses it, without
Grafana (not a Debian package): its structure and provisioning are checked, then every panel's PromQL is
expanded as Grafana expands it ($job from label_values(baton_step, job), $__interval and $__rate_interval from
the dashboard's time range and the scrape interval, $__range) and evaluated through Prometheus' HTTP API against
a live 2-stage job (prometheus_fixture.LiveJob). A query error fails; so does an empty result (or NaN) on any
panel but those that are empty on a healthy CPU run (OPTIONAL_PANELS). Prints every query and its result.
"""
import json
import math
import os
import re
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prometheus_fixture import (JOB_NAME, PROMETHEUS_DIR, ROOT, SCRAPE_INTERVAL_S, LiveJob, fail,  # noqa: E402
                                label_string)

GRAFANA_DIR = os.path.join(ROOT, "deploy", "grafana")
DASHBOARD = os.path.join(GRAFANA_DIR, "dashboards", "baton-training.json")
UID = "baton-training"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
ROWS = ["progress", "loss", "utilisation", "links", "memory", "errors", "replicas"]  # words each row title must hold, in order
# Empty while nothing fails, no GPU is used and the replicas meet at the coordinator (the live job is one pipeline;
# tests/replicas_test.cc checks the allreduce gauges); every other panel must show data during training.
OPTIONAL_PANELS = {"RPC errors / s", "Device memory allocated", "Gradient allreduce (replica_exchange: allreduce)"}
STAGES = {"0", "1"}  # a per-stage panel shows every stage of the 2-stage job
MAX_DATA_POINTS = 1000  # about a full-width panel's pixels: Grafana's default maxDataPoints


def panels_with_rows(dashboard):
    """(row title, panel) for every non-row panel, nested (collapsed) rows included, in dashboard order."""
    row = ""
    for p in dashboard["panels"]:
        if p.get("type") == "row":
            row = p["title"]
            for nested in p.get("panels", []):
                yield row, nested
        else:
            yield row, p


def check_structure(dashboard, errors):
    if dashboard.get("uid") != UID:
        errors.append(f"uid is {dashboard.get('uid')!r}, not {UID!r} (links and provisioning rely on it)")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        errors.append(f"no Prometheus datasource variable 'datasource': {ds}")
    job = variables.get("job", {})
    query = job.get("query", {})
    query = query.get("query") if isinstance(query, dict) else query
    if query != "label_values(baton_step, job)" or job.get("datasource") != DATASOURCE:
        errors.append(f"variable 'job' must be label_values(baton_step, job) on ${{datasource}}: {job}")
    rows = [p["title"] for p in dashboard["panels"] if p.get("type") == "row"]
    if len(rows) != len(ROWS) or not all(w in r.lower() for w, r in zip(ROWS, rows)):
        errors.append(f"rows {rows} are not {ROWS}")
    ids, placed = set(), []
    for row, p in panels_with_rows(dashboard):
        where = f"panel {p.get('title')!r} ({row})"
        if p.get("datasource") != DATASOURCE:
            errors.append(f"{where}: datasource {p.get('datasource')} is not ${{datasource}}")
        if p["id"] in ids:
            errors.append(f"{where}: duplicate id {p['id']}")
        ids.add(p["id"])
        if not p.get("targets") or not all(t.get("expr") for t in p["targets"]):
            errors.append(f"{where}: no PromQL")
        for t in p.get("targets", []):
            if t.get("datasource", DATASOURCE) != DATASOURCE:
                errors.append(f"{where} {t['refId']}: datasource {t['datasource']} is not ${{datasource}}")
        g = p["gridPos"]
        if g["x"] + g["w"] > 24:
            errors.append(f"{where} is wider than the 24-column grid")
        for title, o in placed:
            if (g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"] and g["y"] < o["y"] + o["h"]
                    and o["y"] < g["y"] + g["h"]):
                errors.append(f"{where} overlaps {title!r}")
        placed.append((p.get("title"), g))


def check_provisioning(errors):
    with open(os.path.join(PROMETHEUS_DIR, "prometheus.yml")) as f:
        scrape_interval = yaml.safe_load(f)["global"]["scrape_interval"]
    with open(os.path.join(GRAFANA_DIR, "provisioning", "datasources", "baton.yml")) as f:
        (source,) = yaml.safe_load(f)["datasources"]
    if source["type"] != "prometheus" or source.get("jsonData", {}).get("timeInterval") != scrape_interval:
        errors.append(f"datasource provisioning: want type prometheus, timeInterval {scrape_interval}: {source}")
    with open(os.path.join(GRAFANA_DIR, "provisioning", "dashboards", "baton.yml")) as f:
        (provider,) = yaml.safe_load(f)["providers"]
    if provider["type"] != "file" or not provider.get("options", {}).get("path"):
        errors.append(f"dashboard provisioning: want a file provider with options.path: {provider}")


def round_interval(ms):
    """Grafana's rangeutil.roundInterval: the 'nice' interval at or below a raw one (milliseconds)."""
    steps = [(15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000), (3500, 2000),
             (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000), (45000, 30000), (90000, 60000),
             (210000, 120000), (450000, 300000), (750000, 600000), (1050000, 900000), (1500000, 1200000),
             (2700000, 1800000), (5400000, 3600000)]
    if ms < 10:
        return 1
    for below, value in steps:
        if ms < below:
            return value
    return 7200000


def grafana_variables(dashboard, job_values):
    """What Grafana substitutes for the dashboard's default time range and the test's 1 s scrape interval."""
    m = re.fullmatch(r"now-(\d+)([smhd])", dashboard["time"]["from"])
    range_s = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    interval_ms = max(round_interval(range_s * 1000 / MAX_DATA_POINTS), SCRAPE_INTERVAL_S * 1000)
    rate_ms = max(interval_ms + SCRAPE_INTERVAL_S * 1000, 4 * SCRAPE_INTERVAL_S * 1000)
    job = job_values[0] if len(job_values) == 1 else "(" + "|".join(map(re.escape, job_values)) + ")"
    return {"job": re.escape(job) if len(job_values) == 1 else job,
            "__interval": f"{interval_ms // 1000}s" if interval_ms >= 1000 else f"{interval_ms}ms",
            "__interval_ms": str(interval_ms), "__rate_interval": f"{rate_ms // 1000}s",
            "__range": f"{range_s}s", "__range_s": str(range_s), "__range_ms": str(range_s * 1000),
            "datasource": "baton-prometheus"}


def expand(expr, variables):
    """Grafana's template substitution: $name, ${name}, ${name:format} and [[name]]; unknown names fail."""
    def sub(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in variables:
            raise KeyError(f"unknown variable ${name} in {expr}")
        return variables[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", sub, expr)


def evaluate_panels(dashboard, job, variables):
    """Evaluates every target at one instant (and as a range query where the panel draws a time series);
    returns the failures."""
    failures = []
    at = time.time()
    for row, panel in panels_with_rows(dashboard):
        core = panel["title"] not in OPTIONAL_PANELS
        for target in panel["targets"]:
            name = f"[{row} / {panel['title']} / {target['refId']}]{'' if core else ' (optional)'}"
            try:
                query = expand(target["expr"], variables)
                result = job.prom.query(query, at)
                if panel["type"] == "timeseries":  # Grafana draws these from range queries, step $__interval
                    step_s = int(variables["__interval_ms"]) // 1000
                    job.prom.query_range(query, at - 12 * step_s, at, step_s)
            except (KeyError, ValueError) as e:
                print(f"{name}\n    ERROR {e}")
                failures.append(f"{name}: {e}")
                continue
            print(f"{name}\n    {query}")
            for r in result[:4]:
                print(f"    = {r['value'][1]:>14} {label_string(r['metric'])}")
            if len(result) > 4:
                print(f"    ... {len(result)} series")
            values = [float(r["value"][1]) for r in result]
            stages = {r["metric"]["stage"] for r in result if "stage" in r["metric"]}
            if core and not result:
                failures.append(f"{name}: empty result for {query}")
            elif core and any(math.isnan(v) for v in values):
                failures.append(f"{name}: NaN in {query}")
            elif core and stages and stages != STAGES:
                failures.append(f"{name}: stages {sorted(stages)}, want {sorted(STAGES)}, from {query}")
    return failures


def main():
    started = time.monotonic()
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    errors = []
    check_structure(dashboard, errors)
    check_provisioning(errors)
    if errors:
        fail("dashboard structure:\n  " + "\n  ".join(errors))
    print(f"{DASHBOARD}: uid {dashboard['uid']}, "
          f"{sum(1 for _ in panels_with_rows(dashboard))} panels, structure ok")
    with LiveJob("grafana") as job:
        job.wait_training()
        # label_values(baton_step, job): Grafana asks exactly this of the Prometheus API.
        job_values = job.prom.get("/api/v1/label/job/values", **{"match[]": "baton_step"})["data"]
        if job_values != [JOB_NAME]:
            fail(f"variable job: label_values(baton_step, job) = {job_values}, want [{JOB_NAME!r}]")
        variables = grafana_variables(dashboard, job_values)
        print(f"variables: {json.dumps(variables)}")
        failures = evaluate_panels(dashboard, job, variables)
        if failures:
            fail(f"{len(failures)} dashboard queries failed:\n  " + "\n  ".join(failures))
    print(f"PASS in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
