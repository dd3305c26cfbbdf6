"""The dashboard in headless Chromium (Debian's package) against a real agent_svc on loopback, embedded mode:
log in with a key, submit a bundled problem on the cpu device, follow the job to its best kernel, open the
trajectory and the problem, and check that another tenant sees none of it.

Screenshots are written to out/dashboard-screenshots/ (git-ignored; CUDA_AGENT_SCREENSHOTS overrides it) and the
path is printed. Never `playwright install`: the test drives /usr/bin/chromium.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cuda_agent.contracts.candidate import MODEL_NEW_FILE
from cuda_agent.contracts.common import Device
from cuda_agent.selftest.problems import TRANSPOSE_CANDIDATE, TRANSPOSE_PROBLEM, eval_options
from cuda_agent.selftest.sandbox import replay_trajectory
from tests.conftest import ROOT
from tests.integration.conftest import Process, start_api

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PROBLEM = ROOT / "examples" / "problems" / "relu_add.py"
ROLLOUT_TIMEOUT_MS = 240_000  # the heuristic author's search (10 s) plus builds and trials on a loaded CPU

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)"),
    pytest.mark.slow,  # one real rollout: a kernel built and verified on the CPU
]


@dataclass
class Dashboard:
    base: str  # agent_svc
    urls: dict[str, str]  # every service started, by name
    keys: dict[str, str]
    shots: Path
    env: dict[str, str]


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """agent_svc, trainer_svc and dataset_svc in the embedded mode (SQLite, jobs in-process), as README's quick
    start runs them, on one data directory."""
    workdir = tmp_path_factory.mktemp("dashboard")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_AGENT_")}
    env.update(
        CUDA_AGENT_DATA_DIR=str(workdir / "data"),
        CUDA_AGENT_ENVIRONMENT="test",
        CUDA_AGENT_RATE_LIMIT_PER_MINUTE="100000",
        PYTHONUNBUFFERED="1",
    )
    _cli(env, "db", "upgrade")
    keys = {t: re.findall(r"ca_[\w-]+", _cli(env, "apikey", t))[0] for t in ("tenant-a", "tenant-b")}
    shots = Path(os.environ.get("CUDA_AGENT_SCREENSHOTS", ROOT / "out" / "dashboard-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    started: list[Process] = []

    def spawn(args: list[str], env: dict[str, str], name: str) -> Process:
        started.append(Process(args, env, workdir / f"{name}.log"))
        return started[-1]

    try:
        urls = {service: start_api(spawn, env, service) for service in ("agent", "trainer", "dataset")}
        yield Dashboard(urls["agent"], urls, keys, shots, env)
    finally:
        for proc in started:
            proc.kill()  # at once: an open event stream would hold a graceful shutdown
            proc.stop()
        print(f"\ndashboard screenshots: {shots}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Tab:
    """A fresh browser context (its own sessionStorage) that records script errors and every URL it requests."""

    def __init__(self, browser: Any, dashboard: Dashboard) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        self.page.on("request", lambda request: self.urls.append(request.url))
        self.dashboard = dashboard

    def login(self, tenant: str, base: str | None = None) -> None:
        """Log in on ``base`` (default agent_svc); each service is an origin of its own, with its own login."""
        self.page.goto(f"{base or self.dashboard.base}/ui/")
        self.page.fill("#api-key", self.dashboard.keys[tenant])
        self.page.click("#login-form button[type=submit]")
        self.page.wait_for_selector("#jobs-table")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.dashboard.shots / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()


def test_pages_hold_no_data_and_a_bad_key_is_refused(browser: Any, dashboard: Dashboard) -> None:
    static = httpx.get(f"{dashboard.base}/ui/", timeout=10)
    assert static.status_code == 200 and "default-src 'none'" in static.headers["content-security-policy"]
    assert httpx.get(f"{dashboard.base}/v1/jobs", timeout=10).status_code == 401
    tab = Tab(browser, dashboard)
    tab.page.goto(f"{dashboard.base}/ui/#/jobs")
    tab.page.wait_for_selector("#login-form")  # no key: the login form, not the jobs
    tab.page.fill("#api-key", "ca_not-a-key")
    tab.page.click("#login-form button[type=submit]")
    tab.page.wait_for_selector("text=invalid or revoked API key")
    tab.close()


def test_submit_follow_the_job_to_its_best_kernel_and_keep_tenants_apart(browser: Any, dashboard: Dashboard) -> None:
    tab = Tab(browser, dashboard)
    page = tab.page
    tab.login("tenant-a")
    page.click("text=Optimize")
    page.set_input_files("#problem-file", str(PROBLEM))
    playwright_api.expect(page.locator("#problem-source")).to_have_value(re.compile("get_inputs"))
    page.select_option("#policy", "heuristic")
    page.select_option("#device", "cpu")
    page.fill("#max-turns", "8")
    page.fill("#budget", "10")
    page.fill("#timing-trials", "20")
    tab.shot("1-submit")
    page.click("#submit-form button[type=submit]")
    page.wait_for_selector("#job-status")
    job_id = page.url.rsplit("/", 1)[1]
    assert re.fullmatch(r"[0-9a-f]{32}", job_id), page.url

    # The turns as they stream in; a rollout done in one turn may go straight to its best kernel.
    page.wait_for_selector("#live-summary, #best-kernel", timeout=ROLLOUT_TIMEOUT_MS)
    tab.shot("2-job-live")
    page.wait_for_selector("#best-kernel", timeout=ROLLOUT_TIMEOUT_MS)
    verdict = page.inner_text("#verdict")
    assert "correct" in verdict and "passed" in verdict and "speedup vs eager" in verdict
    assert page.locator("#best-kernel .tok-keyword").count() > 0  # the source is highlighted
    assert page.locator("#verdict svg circle").count() > 0  # timing samples are plotted
    assert "succeeded" in page.inner_text("#job-status")
    tab.shot("3-job-best-kernel")

    page.click("#best-kernel >> text=Trajectory")
    page.wait_for_selector("article.turn")
    assert page.locator(".tool-call").count() > 0 and page.locator(".observation").count() > 0
    tab.shot("4-trajectory")
    page.go_back()
    page.click("#best-kernel >> text=Problem")
    page.wait_for_selector("text=Candidates verified")
    assert page.locator("a[href^='#/candidates/']").count() > 0
    tab.shot("5-problem")
    assert not tab.errors, tab.errors
    assert not [u for u in tab.urls if dashboard.keys["tenant-a"] in u], "the key was put in a URL"
    tab.close()

    other = Tab(browser, dashboard)
    other.login("tenant-b")
    other.page.wait_for_selector("text=No jobs yet")
    assert job_id not in other.page.content()
    other.page.goto(f"{dashboard.base}/ui/#/jobs/{job_id}")
    other.page.wait_for_selector(f"text=job {job_id} not found")
    other.page.goto(f"{dashboard.base}/ui/#/problems")
    other.page.wait_for_selector("text=No problems yet")
    other.shot("6-other-tenant")
    other.close()


# Stores a training run with per-step metrics and a synthesized dataset's statistics for tenant-a, the way the
# trainer and the synthesis job store them (no training or synthesis is run: minutes of work for a page test).
SEED_SCRIPT = """
import math, sys
from cuda_agent.contracts.common import JobStatus
from cuda_agent.dataset.pipeline import Rejection, SynthesisOptions, SynthesisReport, SynthesisStats
from cuda_agent.dataset.store import save_report
from cuda_agent.db import session_scope
from cuda_agent.db.models import TrainingRun
from cuda_agent.train.store import create_run, finish_run, record_step

steps = int(sys.argv[1])
create_run("a" * 32, "ppo", {}, tenant="tenant-a")
with session_scope() as session:
    run = session.get(TrainingRun, "a" * 32)
    for step in range(1, steps + 1):
        record_step(session, run, step, {
            "reward_mean": -1 + 3 * step / steps, "pass_rate": step / steps, "entropy": math.exp(-step / steps),
            "clip_fraction": 0.1 / step, "kl": 0.01 * step, "value_loss": 1 / step,
        })
finish_run("a" * 32, JobStatus.SUCCEEDED)
counts = {1: 2, 2: 3, 3: 5}
kept = sum(counts.values())
stats = SynthesisStats(
    requested=kept, candidates=kept + 2, kept=kept, removed={"filter:finite": 2},
    reasons={"filter:finite": ["output has NaN"]}, op_counts=counts,
    op_count_share={c: n / kept for c, n in counts.items()}, elapsed_s=60.0, kept_per_minute=float(kept),
)
rejections = [Rejection(index=i, stage="filter:finite", reason="output has NaN") for i in range(2)]
report = SynthesisReport(n=kept, seed=0, options=SynthesisOptions(), kept=[], rejections=rejections, stats=stats)
print(save_report("ops-page-test", report, tenant="tenant-a"))
"""


def test_training_run_and_dataset_pages_plot_what_the_services_serve(browser: Any, dashboard: Dashboard) -> None:
    steps = 20
    seeded = subprocess.run(
        [sys.executable, "-c", SEED_SCRIPT, str(steps)],
        env=dashboard.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seeded.returncode == 0, seeded.stderr
    dataset_id = seeded.stdout.split()[-1]
    tab = Tab(browser, dashboard)
    page = tab.page
    tab.login("tenant-a", dashboard.urls["trainer"])
    page.goto(f"{dashboard.urls['trainer']}/ui/#/runs")
    page.click("text=aaaaaaaa")
    page.wait_for_selector("figure")
    captions = page.locator("figcaption").all_inner_texts()
    assert captions[:6] == ["reward_mean", "pass_rate", "entropy", "clip_fraction", "kl", "value_loss"]
    assert page.locator("figure").first.locator("circle").count() == steps
    tab.shot("7-training-run")

    tab.login("tenant-a", dashboard.urls["dataset"])
    page.goto(f"{dashboard.urls['dataset']}/ui/#/datasets/{dataset_id}")
    page.wait_for_selector("text=Removed by filter")
    assert page.locator("svg rect title").count() >= 3  # a bar per operator count and series
    assert "output has NaN" in page.inner_text("main")
    tab.shot("8-dataset")

    # agent_svc does not serve runs: its page says so instead of failing.
    tab.login("tenant-a")
    page.goto(f"{dashboard.base}/ui/#/runs")
    page.wait_for_selector("text=does not serve /v1/runs")
    assert not tab.errors, tab.errors
    tab.close()

    other = Tab(browser, dashboard)
    other.login("tenant-b", dashboard.urls["trainer"])
    other.page.goto(f"{dashboard.urls['trainer']}/ui/#/runs")
    other.page.wait_for_selector("text=No training runs yet")
    other.close()


def test_diff_and_highlighting_treat_hostile_text_as_text(browser: Any, dashboard: Dashboard) -> None:
    # CSP is bypassed for this context only: the test evaluates the page's module functions directly.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.goto(f"{dashboard.base}/ui/#/login")
    result = page.evaluate(
        """async () => {
            const lib = await import("./lib.js");
            const hostile = '<img src=x onerror="window.pwned=1">';
            const code = lib.highlight(`# ${hostile}\\nx = "${hostile}"\\nfor i in range(3): pass`, "python");
            document.body.append(code);
            return {
                diff: lib.diffLines("a\\nb\\nc\\nd", "a\\nx\\nc\\nd\\ne"),
                text: code.textContent,
                images: code.querySelectorAll("img").length,
                kinds: [...code.querySelectorAll("span")].map((s) => s.className),
                pwned: window.pwned === 1,
            };
        }"""
    )
    context.close()
    assert result["diff"] == [[" ", "a"], ["-", "b"], ["+", "x"], [" ", "c"], [" ", "d"], ["+", "e"]]
    assert result["images"] == 0 and not result["pwned"]
    assert '<img src=x onerror="window.pwned=1">' in result["text"]
    assert result["kinds"][:2] == ["tok-comment", "tok-string"] and "tok-keyword" in result["kinds"]


def test_the_job_page_diffs_the_best_kernel_against_the_candidate_before_it(browser: Any, dashboard: Dashboard) -> None:
    # A recorded rollout: a wrong candidate, then a right one; the diff must show what changed between them.
    wrong = TRANSPOSE_CANDIDATE.replace("out.copy_(x.t())", "out.zero_()")
    calls = [
        ("write_file", {"path": MODEL_NEW_FILE, "content": wrong}),
        ("verify", {}),
        ("write_file", {"path": MODEL_NEW_FILE, "content": TRANSPOSE_CANDIDATE}),
        ("verify", {}),
    ]
    body = {
        "problem_source": TRANSPOSE_PROBLEM,
        "policy": "replay",
        "policy_options": {"trajectory": replay_trajectory(calls)},
        "config": {**eval_options(Device.CPU), "form": "kernelbench", "max_turns": len(calls) + 1},
    }
    headers = {"Authorization": f"Bearer {dashboard.keys['tenant-a']}"}
    submitted = httpx.post(f"{dashboard.base}/v1/optimize", json=body, headers=headers, timeout=30)
    assert submitted.status_code == 202, submitted.text
    tab = Tab(browser, dashboard)
    tab.login("tenant-a")
    tab.page.goto(f"{dashboard.base}/ui/#/jobs/{submitted.json()['id']}")
    tab.page.wait_for_selector("#diff .diff-add", timeout=ROLLOUT_TIMEOUT_MS)
    assert "out.zero_()" in tab.page.inner_text("#diff .diff-del")
    assert "out.copy_(x.t())" in tab.page.inner_text("#diff .diff-add")
    previous = re.search(r"turn 1 \((\w+), .*\) → turn 3", tab.page.inner_text("#diff"))
    assert previous is not None and previous[1] != "correct", tab.page.inner_text("#diff")[:200]
    tab.shot("9-job-diff")
    assert not tab.errors, tab.errors
    tab.close()
