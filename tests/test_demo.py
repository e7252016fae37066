"""`prl demo --small` from nothing to a populated store, once per CI run (the full budget is
bench/demo.py, which records bench/results/demo.json).

The same flow as the full demo at a seconds-scale budget (flows.pipeline.small): every row of the
budget is stored, the demo prints where the store is and how to open the dashboard, and it writes
its own result file (run manifest, phase times, held-out averages with CIs, paired comparisons)
whose figures agree with plain SQL over the stored samples (written in the test, not prl.evaluation.report's).
"""

from __future__ import annotations

import json

import pytest

from prl.manifest import MANIFEST_KEYS
from prl.store.db import Store


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_small_demo_writes_its_store_and_result_file(small_demo):
    out, r = small_demo["out"], small_demo["result"]  # `prl demo --small`, run once per session (tests/conftest.py)
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
    # the result file's figures, recomputed here from the stored samples in plain SQL: average@n is the mean over
    # problems of each problem's share of correct samples (docs/architecture.md §Metrics and aggregates), and a
    # paired difference is b's average minus a's over the problems both runs have
    per_problem = """SELECT problem_id, avg(CASE WHEN verdict = 'correct' THEN 1.0 ELSE 0.0 END) AS p, count(*) AS n
                     FROM samples WHERE run_id = ? AND dataset = 'synth_test' GROUP BY problem_id"""
    with store.read() as con:
        for name in ("warm_start", "grpo", "prl"):
            avg, problems, n = con.execute(f"SELECT avg(p), count(*), min(n) FROM ({per_problem})",
                                           [f"demo-eval-{name}"]).fetchone()
            held = result["held_out"][name]
            assert (held["problems"], held["n"]) == (problems, n) == (12, 2)
            assert held["average"] == pytest.approx(avg, abs=1e-12)
            assert held["lo"] <= held["average"] <= held["hi"]
        assert set(result["paired"]) == {"demo-eval-prl vs demo-eval-warm_start", "demo-eval-grpo vs demo-eval-warm_start",
                                         "demo-eval-prl vs demo-eval-grpo"}
        for label, paired in result["paired"].items():
            b, a = label.split(" vs ")
            avg_a, avg_b, diff, common = con.execute(
                f"SELECT avg(a.p), avg(b.p), avg(b.p - a.p), count(*) FROM ({per_problem}) a JOIN ({per_problem}) b "
                "USING (problem_id)", [a, b]).fetchone()
            assert common == 12, label
            assert (paired["average_a"], paired["average_b"], paired["diff"]) == pytest.approx((avg_a, avg_b, diff), abs=1e-12)
            assert paired["lo"] <= paired["diff"] <= paired["hi"], label


def test_the_demos_own_runs_trip_no_alert(small_demo):
    """The online monitors stay silent on the demo's training runs (docs/architecture.md §Runs that say when they go
    wrong), which log what they read: KL to the reference and the engine's mismatch KL at every step."""
    from prl.training.monitors import MonitorConfig, alerts

    out = small_demo["out"]
    assert small_demo["result"].returncode == 0, small_demo["result"].stderr[-3000:]
    store = Store(out / "store.duckdb", create=False)
    for run in ("demo-train-prl", "demo-train-grpo"):
        hist = [dict(m) for _, m in sorted(_by_step(store, run).items())]
        assert len(hist) == 3 and all("actor/kl_ref" in h and "rollout/mismatch_kl" in h for h in hist)
        assert store.records("alerts_for_runs", run_ids=[run]) == []
        assert alerts(hist, MonitorConfig()) == []


def _by_step(store, run_id):
    by = {}
    for r in store.records("train_metrics_for_runs", run_ids=[run_id]):
        by.setdefault(r["step"], {})[r["name"]] = float("nan") if r["value"] is None else r["value"]
    return by
