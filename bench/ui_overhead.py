"""What watching a job in the browser costs the job (issue 37): the demo job (configs/jobs/demo.yaml, the tiny FLUX.2
pipeline over two stage workers) run through one job service, alternately with no page open and with its page open
in Chromium (live: server-sent events, a panel refresh per step) plus the jobs page (polled every 2 s), `--pairs`
times. Reports the median step seconds (steps 2.., from each job's train_log.jsonl) of each side and their ratio.

    .venv/bin/python bench/ui_overhead.py [--pairs 3] [--steps 60] [--memory_steps 1500]

With --memory_steps N it then follows one N-step job with its page open and, every 15 s, collects the page's garbage
and records its JavaScript heap and element count: a page that grows over a long run shows it here.
The last line is one JSON object."""

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "browser"))
from browser_env import SOURCE_DIR, Stack, chromium, sign_in, text_of, wait_until  # noqa: E402

import requests  # noqa: E402


def submit(stack, session, csrf, steps):
    with open(os.path.join(SOURCE_DIR, "configs", "jobs", "demo.yaml")) as f:
        yaml = f.read()
    r = session.post(stack.url + "/submit", data={"csrf": csrf, "job_yaml": yaml, "job_file": "demo.yaml",
                                                  "steps": str(steps)}, allow_redirects=False)
    assert r.status_code == 303, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def step_seconds(stack, job):
    return [json.loads(line)["step_seconds"] for line in stack.logged_steps(job)][1:]


def page_memory(stack, session, csrf, steps):
    """(seconds, JS heap bytes after a GC, elements) every 15 s while an N-step job runs with its page open."""
    driver = chromium(["--js-flags=--expose-gc", "--enable-precise-memory-info"])
    samples = []
    try:
        sign_in(driver, stack.url, stack.token)
        job = submit(stack, session, csrf, steps)
        driver.get(f"{stack.url}/jobs/{job}")
        start = time.time()
        probe = ("window.gc(); return [performance.memory.usedJSHeapSize, "
                 "document.getElementsByTagName('*').length];")
        while text_of(driver, "#job-state") != "finished":
            heap, elements = driver.execute_script(probe)
            samples.append((round(time.time() - start), heap, elements))
            time.sleep(15)
    finally:
        driver.quit()
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--memory_steps", type=int, default=0)
    args = ap.parse_args()
    stack = Stack("bench")
    stack.demo_data()
    stack.start()
    watcher, jobs_tab = chromium(), chromium()
    try:
        sign_in(watcher, stack.url, stack.token)
        sign_in(jobs_tab, stack.url, stack.token)
        session = requests.Session()
        for c in watcher.get_cookies():
            session.cookies.set(c["name"], c["value"])
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', session.get(stack.url + "/").text).group(1)
        closed, opened = [], []
        for _ in range(args.pairs):
            for watched in (False, True):
                job = submit(stack, session, csrf, args.steps)
                if watched:
                    watcher.get(f"{stack.url}/jobs/{job}")
                    jobs_tab.get(stack.url + "/")
                    wait_until(watcher, lambda d: text_of(d, "#job-state") == "finished", 600, "the job")
                    watcher.get("about:blank")
                    jobs_tab.get("about:blank")
                else:
                    while session.get(f"{stack.url}/jobs/{job}/panel").text.find('id="job-state">finished') < 0:
                        time.sleep(1)
                (opened if watched else closed).extend(step_seconds(stack, job))
        result = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count()}
        if closed:
            without, with_page = statistics.median(closed), statistics.median(opened)
            result.update({"steps_per_side": len(closed), "median_step_s_without_page": round(without, 4),
                           "median_step_s_with_page": round(with_page, 4),
                           "with_over_without": round(with_page / without, 3)})
            print(f"median step: {without:.4f} s without the page, {with_page:.4f} s with it open "
                  f"({with_page / without:.3f}x), {len(closed)} steps a side")
        if args.memory_steps > 0:
            memory = page_memory(stack, session, csrf, args.memory_steps)
            for t, heap, elements in memory:
                print(f"  {t:5d} s  JS heap {heap / 1e6:7.2f} MB  {elements} elements")
            result["page_memory"] = [{"s": t, "js_heap_bytes": h, "elements": e} for t, h, e in memory]
        print(json.dumps(result))
    finally:
        watcher.quit()
        jobs_tab.quit()
        stack.stop()


if __name__ == "__main__":
    main()
