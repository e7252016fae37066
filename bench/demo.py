"""The main job at its default budget, recorded: from a fresh clone to the dashboard's first page.

    python bench/demo.py                  # fresh clone → install → prl demo → dashboard (~15-40 min on 2 cores)
    python bench/demo.py --in-place       # only `prl demo` from this checkout's .venv (data → report)
    python bench/demo.py --out runs/demo-bench --keep

What a new user does, timed phase by phase: ``git clone`` of this checkout's HEAD into a new directory,
the README's first command there (``scripts/install.sh && .venv/bin/prl demo``: a new virtual environment,
then the demo from nothing), then ``prl dashboard --db …`` from the clone and its first page (Runs)
loaded in headless Chromium until the page's own text is on screen. The install uses this machine's pip
cache as a user's second install would; whether the cache was warm is recorded (``pip_cache_mib``).
``--in-place`` times only ``prl demo`` from this checkout (labelled *data → report*, not *fresh clone →
dashboard*).

Checks what the demo is built to show (every row of the budget stored; PRL's held-out synthetic average
above the warm start's, mostly by showing its working more often; no run monitor alert in its training runs,
each run's ``train_alerts`` rows recorded as ``alerts``), writes bench/results/demo.json (the
demo's own result file OUT/demo_result.json — commit, machine, phase times, held-out averages with CIs,
paired comparisons — plus the end-to-end phases and what the span covers) and re-renders the figures of
README.md and bench/RESULTS.md. The CI suite runs the demo at its --small budget (tests/test_demo.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from common import render_all, write_json  # noqa: E402

CODE = ("bench/demo.py", "prl", "prl_core", "flows", "prl_cli", "dashboard", "sql", "configs", "scripts",
        "pyproject.toml")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")
SPANS = {"fresh_clone": "fresh clone → dashboard's first page (install included)",
         "in_place": "data → report (`prl demo` in an installed checkout)"}
"""What bench/results/demo.json's ``seconds`` covers, by its ``span`` field (bench/render.py labels the figure)."""


def check(result: dict) -> list[str]:
    """What the demo must show; an empty list when it does."""
    problems = []
    paired = result["paired"].get("demo-eval-prl vs demo-eval-warm_start")
    if paired is None or not paired["diff"] > 0:
        problems.append(f"PRL is not above the warm start on the held-out set: {paired}")
    held = result["held_out"]
    if (held["prl"]["working_share"] or 0) < (held["warm_start"]["working_share"] or 0) + 0.10:
        problems.append("PRL does not show its working clearly more often than the warm start")
    alerted = {run: [a["monitor"] for a in rows] for run, rows in result.get("alerts", {}).items() if rows}
    if not result.get("alerts"):
        problems.append("the demo's store holds no training run whose alerts could be read")
    elif alerted:
        problems.append(f"the demo's own training runs tripped the run monitors: {alerted}")
    return problems


def demo_alerts(db: Path) -> dict[str, list[dict]]:
    """Each training run of the demo's store → the online monitors' alerts it recorded (its ``train_alerts`` rows;
    docs/architecture.md §Runs that say when they go wrong). The demo's own runs are built to trip none."""
    from prl.store.db import Store

    with Store(db, create=False) as store:
        runs = [r["run_id"] for r in store.records("list_runs") if r["kind"] == "train"]
        rows = store.records("alerts_for_runs", run_ids=runs)
    return {run: [{k: a[k] for k in ("step", "monitor", "message")} for a in rows if a["run_id"] == run]
            for run in runs}


def _pip_cache_mib() -> float | None:
    """Size of pip's cache before the install (a warm cache makes the install a copy, not a download)."""
    try:
        where = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    if not where or not Path(where).is_dir():
        return 0.0
    return round(sum(p.stat().st_size for p in Path(where).rglob("*") if p.is_file()) / 2**20, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_page_shown(text: str, db_name: str) -> bool:
    """Whether the Runs page's text says its script ran against the store: its caption (``"5 runs: 3 evaluations,
    2 training runs in /path/store.duckdb"``, counted from the store) and the section below the runs table. The table
    itself is drawn on a canvas (Streamlit's data grid), so its run ids are not in the page's text."""
    caption = re.search(rf"^\d+ runs?: .+ in .*{re.escape(db_name)}$", text, re.M)  # the store's path as given
    return bool(caption) and "Reference: the paper's Tables 1 and 3" in text


def first_page_seconds(prl: Path, db: Path, cwd: Path, env: dict[str, str], timeout: float = 300) -> float:
    """Seconds from ``prl dashboard --db DB`` to its first page (Runs) rendered in headless Chromium: the
    page's caption counting the store's runs and the section below its table on screen (Streamlit serves an empty shell at once; the
    page is there only once its script ran against the store)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = _free_port()
    opts = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000"):
        opts.add_argument(flag)
    opts.binary_location = shutil.which("chromium") or "chromium"
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=opts)
    t0 = time.monotonic()
    server = subprocess.Popen([str(prl), "dashboard", "--db", str(db), "--port", str(port)], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() - t0 > timeout or server.poll() is not None:
                    raise SystemExit(f"the dashboard did not start (exit {server.poll()})")
                time.sleep(0.1)
        driver.get(f"http://127.0.0.1:{port}/")
        WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: first_page_shown(
            d.find_element(By.TAG_NAME, "body").text, db.name))
        return time.monotonic() - t0
    finally:
        driver.quit()
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, env=env, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {r.returncode}); its output is above")
    return round(time.monotonic() - t, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="working directory (default: a temporary one, removed after)")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("--in-place", action="store_true",
                    help="time only `prl demo` from this checkout's environment (no clone, install or dashboard)")
    args = ap.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="prl-demo-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and k != "PRL_VENV"}
    env.setdefault("PREFECT_HOME", str(base / "prefect-home"))
    end_to_end: dict[str, float] = {}
    extra: dict[str, object] = {}
    if args.in_place:
        checkout, prl = ROOT, Path(sys.executable).parent / "prl"
    else:
        checkout = base / "clone"
        if checkout.exists():
            raise SystemExit(f"{checkout} exists: the bench records a demo from nothing; choose another --out")
        extra["pip_cache_mib"] = _pip_cache_mib()
        end_to_end["clone"] = _timed(["git", "clone", "-q", str(ROOT), str(checkout)], base, env)
        end_to_end["install"] = _timed(["scripts/install.sh"], checkout, env)
        prl = checkout / ".venv" / "bin" / "prl"
    out = checkout / "runs" / "demo" if not args.in_place else base / "demo"
    if out.exists():
        raise SystemExit(f"{out} exists: the bench records a demo from nothing; choose another --out")
    cmd = [str(prl), "demo", "--quiet"] + (["--out", str(out)] if args.in_place else [])
    end_to_end["demo"] = _timed(cmd, checkout, env)
    result = json.loads((out / "demo_result.json").read_text())
    if not args.in_place:
        end_to_end["dashboard_first_page"] = round(first_page_seconds(prl, out / "store.duckdb", checkout, env), 1)
    result["alerts"] = demo_alerts(out / "store.duckdb")
    failed = check(result)
    result["checks"] = {"passed": not failed, "problems": failed}
    result["pipeline_seconds"] = result["seconds"]  # the flow's own span, data → report
    result["span"] = "in_place" if args.in_place else "fresh_clone"
    result["span_label"] = SPANS[result["span"]]
    result["end_to_end"] = end_to_end
    result["seconds"] = round(sum(end_to_end.values()), 1)
    result.update(extra)
    write_json("demo", result, code=CODE)
    render_all()
    print(f"[demo] {result['span_label']}: {result['seconds']:.0f} s ({end_to_end}); checks "
          f"{'passed' if not failed else 'FAILED: ' + '; '.join(failed)}; bench/results/demo.json written", file=sys.stderr)
    if not args.keep and not args.out:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
