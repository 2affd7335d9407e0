"""What the browser tests share: a real job service (`coordinator --listen`, TLS and a token, two local stage workers
per job), a real `baton ui` in front of it, and Debian's Chromium driven headless through chromedriver (Selenium).

Nothing is mocked: jobs train, files are real, the page is what a person would see. Screenshots go to
$BATON_BROWSER_SHOTS (default build/browser-shots/)."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("BATON_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
SHOTS = os.environ.get("BATON_BROWSER_SHOTS", os.path.join(SOURCE_DIR, "build", "browser-shots"))


def run(*args, cwd=None):
    """Runs a Baton binary (BIN_DIR/args[0]) and fails with its output when it fails."""
    cmd = [os.path.join(BIN_DIR, args[0]), *map(str, args[1:])]
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    return r.stdout


def wait_for_line(path, pattern, proc, seconds=120):
    """The first match of `pattern` in the log file `path`, waiting for it while `proc` lives."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        text = ""
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                text = f.read()
        m = re.search(pattern, text)
        if m:
            return m
        if proc.poll() is not None:
            raise AssertionError(f"{path}: the process exited {proc.returncode} before saying {pattern}:\n{text}")
        time.sleep(0.05)
    raise AssertionError(f"{path}: no {pattern} in {seconds} s")


class Stack:
    """A job service and the browser view of it, in a fresh folder `dir` (the view's working directory: relative
    paths in submitted jobs are read from it)."""

    def __init__(self, name):
        self.dir = tempfile.mkdtemp(prefix=f"baton-browser-{name}-")
        self.certs = os.path.join(self.dir, "certs")
        run("baton", "certs", "--out", self.certs, "--hosts", "127.0.0.1")
        with open(os.path.join(self.certs, "token")) as f:
            self.token = f.read().strip()
        self.root = os.path.join(self.dir, "jobs")
        self.procs = []

    def start(self):
        self.service = self._start_service("127.0.0.1:0", "coordinator.log")
        ui_log = os.path.join(self.dir, "ui.log")
        ui = self._spawn(["baton", "ui", "--server", self.service, "--listen", "127.0.0.1:0", "--tls-dir",
                          os.path.join(self.certs, "client")], ui_log)
        self.url = "http://" + wait_for_line(ui_log, r"serving http://(\S+)/ ", ui).group(1)
        return self

    def _start_service(self, listen, log_name):
        log = os.path.join(self.dir, log_name)
        self.coordinator = self._spawn(["coordinator", f"--listen={listen}", "--stages=2", f"--output={self.root}",
                                        f"--data_root={self.dir}", "--rpc_timeout_s=60",
                                        f"--stage_worker={os.path.join(BIN_DIR, 'stage_worker')}",
                                        f"--tls_dir={os.path.join(self.certs, '127.0.0.1')}",
                                        f"--token_file={os.path.join(self.certs, 'token')}"], log)
        return wait_for_line(log, r"LISTENING (\S+)", self.coordinator).group(1)

    def kill_service(self):
        """SIGKILLs the job service (its local stage workers die with it: PR_SET_PDEATHSIG)."""
        self.coordinator.kill()
        self.coordinator.wait()

    def restart_service(self):
        """A new job service on the same address and folder, as systemd would restart it: it finds the jobs on disk and
        resumes the one that was running."""
        self._start_service(self.service, f"coordinator-{len(self.procs)}.log")

    def _spawn(self, args, log):
        env = dict(os.environ)
        env.pop("BATON_TLS_DIR", None)
        env.pop("BATON_TOKEN", None)
        with open(log, "w") as out:
            proc = subprocess.Popen([os.path.join(BIN_DIR, args[0]), *args[1:]], cwd=self.dir, env=env, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.environ.get("BATON_KEEP_BROWSER_DIRS") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)

    def output_dir(self, job_id):
        (name,) = [d for d in os.listdir(self.root) if d.endswith(f"-{job_id}")]
        return os.path.join(self.root, name)

    def logged_steps(self, job_id):
        """The step records of the job's train_log.jsonl."""
        with open(os.path.join(self.output_dir(job_id), "train_log.jsonl")) as f:
            return [line for line in f if '"event"' not in line and '"loss"' in line]

    def demo_data(self):
        """scripts/demo.sh's pipeline and cache, where configs/jobs/demo.yaml names them (out/demo/...)."""
        demo = os.path.join(self.dir, "out", "demo")
        run("baton", "init-weights", "--pipeline", "tiny", "--trained", os.path.join(SOURCE_DIR, "data", "demo_pipeline"),
            "--out", os.path.join(demo, "pipeline"), "--seed", "0")
        run("encoder_worker", "--dataset", os.path.join(SOURCE_DIR, "data", "sample"), "--cache",
            os.path.join(demo, "cache"), "--model", os.path.join(demo, "pipeline"), "--resolution", "128",
            "--max_sequence_length", "128", "--threads", "1")


def chromium(extra_args=()):
    """Debian's Chromium, headless, through Debian's chromedriver: no browser is downloaded."""
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600",
                "--autoplay-policy=no-user-gesture-required", "--disable-gpu", *extra_args]:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                              options=options)
    driver.set_page_load_timeout(60)
    return driver


def sign_in(driver, url, token):
    driver.get(url + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()


def screenshot(driver, name, whole_page=False):
    """Saves what the window shows (`whole_page`: the window grown to the page's height first) as SHOTS/name.png."""
    os.makedirs(SHOTS, exist_ok=True)
    path = os.path.join(SHOTS, name + ".png")
    size = driver.get_window_size()
    if whole_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], min(max(height + 140, size["height"]), 6000))
    driver.save_screenshot(path)
    if whole_page:
        driver.set_window_size(size["width"], size["height"])
    return path


def wait_until(driver, condition, seconds=180, what="the condition"):
    return WebDriverWait(driver, seconds, poll_frequency=0.2).until(condition, f"waited {seconds} s for {what}")


def session_of(driver, url):
    """A requests session carrying the browser's cookies (to post what a page would not: bad input)."""
    s = requests.Session()
    host = urllib.parse.urlparse(url).hostname
    for c in driver.get_cookies():
        s.cookies.set(c["name"], c["value"], domain=host)
    return s


def form_token(driver):
    return driver.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")


def loss_points(driver):
    """The points of the loss chart's raw series, as the browser has the SVG."""
    points = driver.execute_script(
        "var p = document.querySelector('#chart-loss polyline[data-series=loss]'); return p && p.getAttribute('points')")
    return len(points.split()) if points else 0


def click(driver, css):
    """Clicks the element `css` names now (live parts of the page are replaced as the job moves: a found element may
    be gone by the time it is clicked)."""
    driver.execute_script("document.querySelector(arguments[0]).click()", css)


def text_of(driver, css):
    return driver.execute_script("var e = document.querySelector(arguments[0]); return e ? e.textContent : null", css)
