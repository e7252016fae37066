"""Run scores and paired comparisons from a store: given rows → expected numbers, checked
against brute-force enumeration and hand computation."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from prl.evaluation.report import ReportError, compare_runs, render_comparison, render_scores, report, run_scores
from prl.store.db import Store

ROOT = Path(__file__).resolve().parents[1]


def _rows(run, outcomes):
    """outcomes: {(dataset, pid): [(answer, correct), ...]}"""
    out = []
    for (d, pid), samples in outcomes.items():
        for i, (ans, ok) in enumerate(samples):
            out.append(dict(run_id=run, dataset=d, problem_id=pid, sample_idx=i, response=f"... \\boxed{{{ans}}}",
                            extracted_answer=ans, verdict="correct" if ok else ("wrong" if ans else "no_answer"),
                            score=float(ok), n_tokens=5, finish_reason="stop", verify_ms=1.0))
    return out


def _store(runs: dict[str, dict], path=":memory:") -> Store:
    s = Store(path)
    for run, outcomes in runs.items():
        s.execute("upsert_run", run_id=run, kind="eval", model="m", status="finished", config={}, manifest={},
                  parent_run_id=None, train_step=None)
        s.insert_samples(_rows(run, outcomes))
    return s


def _random_outcomes(rng, sizes, n, p):
    return {(d, f"{d}/{i}"): [(str(rng.randrange(3)), rng.random() < p) for _ in range(n)]
            for d, size in sizes.items() for i in range(size)}


def _brute_pass_at_k(samples, k):
    subsets = list(itertools.combinations(range(len(samples)), k))
    return sum(any(samples[i][1] for i in sub) for sub in subsets) / len(subsets)


def test_scores_match_brute_force_and_hand_aggregates():
    rng = random.Random(0)
    sizes = {"alpha": 7, "beta": 3}
    outcomes = _random_outcomes(rng, sizes, 4, 0.4)
    s = run_scores(_store({"r": outcomes}), "r", ks=[1, 2, 4], iters=200)
    assert s["n"] == 4 and s["problems"] == 10
    per_ds = {}
    for row in s["datasets"]:
        d = row["dataset"]
        probs = [v for (dd, _), v in sorted(outcomes.items()) if dd == d]
        for k in (1, 2, 4):
            expected = sum(_brute_pass_at_k(v, k) for v in probs) / len(probs)
            assert row[f"pass@{k}"]["value"] == pytest.approx(expected, abs=1e-12)
        avg = sum(sum(ok for _, ok in v) / 4 for v in probs) / len(probs)
        assert row["average@4"]["value"] == pytest.approx(avg)
        assert row["average@4"]["lo"] <= avg <= row["average@4"]["hi"]
        per_ds[d] = avg
    micro = (per_ds["alpha"] * 7 + per_ds["beta"] * 3) / 10
    macro = (per_ds["alpha"] + per_ds["beta"]) / 2
    assert s["aggregates"]["micro"]["average@4"]["value"] == pytest.approx(micro)
    assert s["aggregates"]["macro"]["average@4"]["value"] == pytest.approx(macro)
    text = render_scores(s)
    assert "micro" in text and "macro" in text and "sizes 7/3" in text


def test_maj_at_n_by_hand():
    outcomes = {("d", "d/1"): [("5", True), ("4", False), ("5", True), ("4", False)],  # tie: first seen (5) wins
                ("d", "d/2"): [("4", False), ("5", True), ("4", False), (None, False)],  # majority 4: wrong
                ("d", "d/3"): [(None, False)] * 4}  # no answers: not a majority
    s = run_scores(_store({"r": outcomes}), "r", ks=[4], iters=100)
    assert s["datasets"][0]["maj@4"]["value"] == pytest.approx(1 / 3)


def test_paired_comparison_gained_lost_and_mcnemar():
    a = {("d", f"d/{i}"): [("1", ok)] * 2 for i, ok in enumerate([True, True, False, False, False, True])}
    b = {("d", f"d/{i}"): [("1", ok)] * 2 for i, ok in enumerate([True, False, True, True, True, True])}
    b[("d", "d/9")] = [("1", True)] * 2  # only in B: not compared
    c = compare_runs(_store({"A": a, "B": b}), "A", "B", iters=200)
    assert c["gained"] == ["d/2", "d/3", "d/4"] and c["lost"] == ["d/1"]
    assert c["overall"]["problems"] == 6
    m = c["overall"]["mcnemar"]
    assert (m["gained"], m["lost"]) == (3, 1)
    assert m["p_value"] == pytest.approx(2 * (math.comb(4, 0) + math.comb(4, 1)) / 16)
    assert c["overall"]["diff"]["diff"] == pytest.approx(2 / 6)
    assert "gained (B solves, A does not): 3" in render_comparison(c)


def test_pass_at_k_success_uses_the_first_k_samples():
    a = {("d", "d/1"): [("1", False), ("1", True)]}
    b = {("d", "d/1"): [("1", True), ("1", False)]}
    s = _store({"A": a, "B": b})
    assert compare_runs(s, "A", "B", k=1)["gained"] == ["d/1"]
    assert compare_runs(s, "A", "B", k=2)["gained"] == []


def test_errors_name_the_problem():
    s = _store({"r": {("d", "d/1"): [("1", True)] * 2}})
    with pytest.raises(ReportError, match="'nope' is not in .*runs there: r"):
        run_scores(s, "nope")
    with pytest.raises(ReportError, match=r"k: \[4\] not in \[1, n=2\]"):
        run_scores(s, "r", ks=[4])


def test_full_report_text_and_json():
    rng = random.Random(1)
    sizes = {"math500": 5, "amc23": 4}
    s = _store({"base": _random_outcomes(rng, sizes, 4, 0.2), "prl": _random_outcomes(rng, sizes, 4, 0.6)})
    text = report(s)  # no --runs: every run's tables, no comparison (none was asked for)
    assert "run base" in text and "run prl" in text and "paired comparison" not in text
    assert text.count("MISMATCH") == 1 and "flagged: Table 1 Qwen2.5-Math-1.5B RAFT" in text  # the paper check
    assert "paired comparison: B = prl vs A = base" in report(s, ["base", "prl"], include_paper=False)
    data = json.loads(report(s, ["base", "prl"], [1, 4], as_json=True))
    assert [r["run_id"] for r in data["runs"]] == ["base", "prl"]
    assert data["comparison"]["overall"]["problems"] == 9 and data["comparison_note"] is None
    assert sum(not p["matches"] for p in data["paper"]) == 1
    assert json.loads(report(s, as_json=True, include_paper=False))["comparison"] is None


# two runs evaluated on different data sets: nothing in common (issue 14)
DISJOINT = {"r1": {("math500", f"math500/{i}"): [("7", i == 0), ("3", False)] for i in range(3)},
            "r2": {("amc23", f"amc23/{i}"): [("9", True), ("9", i == 1)] for i in range(2)}}


def _assert_both_tables(text):
    lines = text.splitlines()
    assert "run r1: 3 problems, n=2 samples each" in text and "run r2: 2 problems, n=2 samples each" in text
    math_row = next(l for l in lines if l.startswith("math500 "))  # r1: average@2 = (1/2 + 0 + 0)/3 = 16.7 %
    amc_row = next(l for l in lines if l.startswith("amc23 "))  # r2: average@2 = (1/2 + 2/2)/2 = 75.0 %
    assert math_row.split()[1:4] == ["3", "2", "16.7"]
    assert amc_row.split()[1:4] == ["2", "2", "75.0"]
    assert "suspicious passes in r1" in text and "suspicious passes in r2" in text


def test_report_of_runs_on_different_datasets_prints_both_and_compares_nothing():
    s = _store(DISJOINT)
    text = report(s, include_paper=False)  # `prl report --db STORE`: no --runs, so no comparison
    _assert_both_tables(text)
    assert "paired comparison" not in text and "share no problems" not in text


def test_asked_comparison_of_runs_with_nothing_in_common_says_so_and_keeps_the_tables():
    s = _store(DISJOINT)
    text = report(s, ["r1", "r2"], include_paper=False)  # `--run r1,r2`
    _assert_both_tables(text)
    assert "paired comparison: B" not in text
    assert ("no paired comparison: runs r1 and r2 share no problems (r1: math500; r2: amc23); "
            "there is nothing in common to compare.") in text
    data = json.loads(report(s, ["r1", "r2"], as_json=True, include_paper=False))
    assert [r["run_id"] for r in data["runs"]] == ["r1", "r2"] and data["comparison"] is None
    assert "nothing in common to compare" in data["comparison_note"]
    with pytest.raises(ReportError, match="share no problems"):  # the function itself still refuses
        compare_runs(s, "r1", "r2")


def test_cli_report_of_runs_on_different_datasets(tmp_path):
    db = str(tmp_path / "store.duckdb")
    _store(DISJOINT, db)
    for extra in ([], ["--run", "r1,r2"]):
        r = subprocess.run([sys.executable, "-m", "prl_cli", "report", "--db", db, "--no-paper", *extra],
                           check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "error:" not in r.stderr, r.stderr  # the CLI prints "error: …" for a ReportError
        _assert_both_tables(r.stdout)
        assert ("nothing in common to compare" in r.stdout) == bool(extra)
