"""The main job at its default budget, once per CI run: `prl demo` from nothing to a populated store.

About 10 minutes on 2 cores. It asserts the store holds every row of the budget and that the RL
runs learned what the demo is built to show (the README has the measured CIs): PRL's held-out
synthetic average rises above the warm start's, mostly by showing its working more often.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prl.store.db import Store

ROOT = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_full_demo(tmp_path, prefect_harness):
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "prl_cli", "demo", "--out", str(out), "--no-progress"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=1700)
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"open the dashboard:  prl dashboard --db {out / 'store.duckdb'}" in r.stdout

    store = Store(out / "store.duckdb", create=False)
    for est in ("prl", "grpo"):
        steps = {step for step, *_ in store.rows("train_metrics_for_run", run_id=f"demo-train-{est}")}
        assert steps == set(range(1, 101))
    for name in ("warm_start", "grpo", "prl"):
        counts = store.rows("stored_counts_for_run", run_id=f"demo-eval-{name}")
        assert len(counts) == 500 and {c for *_, c in counts} == {4}  # 400 synthetic + 5 × 20 benchmark problems
        assert store.rows("get_run", run_id=f"demo-eval-{name}")[0][4] == "finished"

    report = json.loads((out / "pipeline_report.json").read_text())
    prl_vs_base = report["synthetic_paired"]["demo-eval-prl vs demo-eval-warm_start"]
    print(f"\n[demo] held-out synthetic: warm start {100 * prl_vs_base['average_a']:.1f}% -> PRL "
          f"{100 * prl_vs_base['average_b']:.1f}% (delta {100 * prl_vs_base['diff']['diff']:+.1f} pp, 95% CI "
          f"[{100 * prl_vs_base['diff']['lo']:+.1f}, {100 * prl_vs_base['diff']['hi']:+.1f}]); pipeline "
          f"{report.get('seconds', 0):.0f} s")
    assert prl_vs_base["diff"]["diff"] > 0
    styles = report["answer_styles"]
    assert styles["prl"]["working_share"] >= styles["warm_start"]["working_share"] + 0.10
