"""`prl demo --small` from nothing to a populated store, once per CI run (the full budget is
bench/demo.py, which records bench/results/demo.json).

The same flow as the full demo at a seconds-scale budget (flows.pipeline.small): every row of the
budget is stored, the demo prints where the store is and how to open the dashboard, and it writes
its own result file (run manifest, phase times, held-out averages with CIs, paired comparisons)
whose figures agree with the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prl.evaluation.report import run_scores
from prl.manifest import MANIFEST_KEYS
from prl.store.db import Store

ROOT = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_small_demo_writes_its_store_and_result_file(tmp_path, prefect_harness):
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "prl_cli", "demo", "--small", "--out", str(out), "--quiet"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=850)
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"open the dashboard:  prl dashboard --db {out / 'store.duckdb'}" in r.stdout

    store = Store(out / "store.duckdb", create=False)
    for est in ("prl", "grpo"):
        steps = {step for step, in store.rows("train_steps_for_run", run_id=f"demo-train-{est}")}
        assert steps == {1, 2, 3}
    for name in ("warm_start", "grpo", "prl"):
        counts = store.rows("stored_counts_for_run", run_id=f"demo-eval-{name}")
        assert len(counts) == 12 + 5 * 2 and {c for *_, c in counts} == {2}  # 12 synthetic + 2 per benchmark
        assert store.rows("get_run", run_id=f"demo-eval-{name}")[0][4] == "finished"

    result = json.loads((out / "demo_result.json").read_text())
    assert set(MANIFEST_KEYS) <= set(result) and result["kind"] == "demo" and result["commit"]
    assert result["machine"]["cores"] and result["config"]["train_steps"] == 3
    assert set(result["phases"]) == {"data", "build_model", "warm_start", "train_prl", "train_grpo",
                                      "eval_warm_start", "eval_grpo", "eval_prl", "report"}
    assert 0 < sum(result["phases"].values()) <= result["seconds"] + 1
    for name in ("warm_start", "grpo", "prl"):  # the result file's figures are the store's
        synth = next(d for d in run_scores(store, f"demo-eval-{name}")["datasets"] if d["dataset"] == "synth_test")
        held = result["held_out"][name]
        assert held["average"] == pytest.approx(synth["average@2"]["value"])
        assert held["lo"] <= held["average"] <= held["hi"]
    paired = result["paired"]["demo-eval-prl vs demo-eval-warm_start"]
    assert paired["diff"] == pytest.approx(paired["average_b"] - paired["average_a"])
    assert paired["average_a"] == pytest.approx(result["held_out"]["warm_start"]["average"])
