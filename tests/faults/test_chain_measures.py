"""The kill chains' figures are measured: `recovered` follows the runs after each kill, and lost,
extra and duplicated rows come from comparing key multisets, so a broken recovery shows up in them
(seconds: a sleeping Python process stands in for the command)."""

from __future__ import annotations

import os
import sys

from chain import Segment, check_record, compare_keys, kill_chain, store_keys

from prl.store.db import Store

REF = [("runs", "e"), ("samples", "e", "d", "p1", 0), ("samples", "e", "d", "p1", 1), ("samples", "e", "d", "p2", 0)]


def test_identical_keys_count_nothing_lost_or_extra():
    assert compare_keys(REF, REF) == {"rows_expected": 4, "rows_lost": 0, "rows_extra": 0, "duplicates": 0}


def test_missing_extra_and_duplicated_rows_are_counted():
    lost = compare_keys(REF[:-1], REF)
    assert lost["rows_lost"] == 1 and lost["rows_extra"] == lost["duplicates"] == 0
    extra = compare_keys(REF + [("samples", "e", "d", "p3", 0)], REF)
    assert extra["rows_extra"] == 1 and extra["rows_lost"] == extra["duplicates"] == 0
    # a rerun that stores a problem again under another run id: the primary key allows it, the units do not
    again = compare_keys(REF + [("runs", "e2"), ("samples", "e2", "d", "p1", 0)], REF)
    assert again == {"rows_expected": 4, "rows_lost": 0, "rows_extra": 2, "duplicates": 2}
    assert compare_keys(REF + REF[1:2], REF)["duplicates"] == 1  # a key held twice (a table without its key)


def _fill(db, runs: dict[str, int]) -> None:
    """A store with, per run id, that many samples of problem p1 and two steps of one metric and rollout."""
    store = Store(db)
    with store.write() as con:
        for run_id, n in runs.items():
            con.execute("insert into runs (run_id, kind, status) values (?, 'eval', 'finished')", [run_id])
            for k in range(n):
                con.execute("insert into samples (run_id, dataset, problem_id, sample_idx, response, verdict, score) "
                            "values (?, 'd', 'p1', ?, 'r', 'wrong', 0)", [run_id, k])
            for step in (1, 2):
                con.execute("insert into train_metrics values (?, ?, 'reward/mean', 0.5)", [run_id, step])
                con.execute("insert into train_rollouts (run_id, step, rollout_idx, problem, response) "
                            "values (?, ?, 0, 'q', 'r')", [run_id, step])
    store.close()


def test_store_keys_read_every_table_a_run_writes(tmp_path):
    _fill(tmp_path / "ref.duckdb", {"e": 2})
    ref = store_keys(tmp_path / "ref.duckdb")
    assert sum(ref.values()) == 1 + 2 + 2 + 2 and ref[("train_metrics", "e", 2, "reward/mean")] == 1
    _fill(tmp_path / "same.duckdb", {"e": 2})
    assert compare_keys(store_keys(tmp_path / "same.duckdb"), ref)["rows_extra"] == 0
    _fill(tmp_path / "less.duckdb", {"e": 1})
    assert compare_keys(store_keys(tmp_path / "less.duckdb"), ref)["rows_lost"] == 1
    # the work stored once more under another run id: every one of its rows is extra and a duplicate
    _fill(tmp_path / "again.duckdb", {"e": 2, "e-resumed": 2})
    assert compare_keys(store_keys(tmp_path / "again.duckdb"), ref) == {
        "rows_expected": 7, "rows_lost": 0, "rows_extra": 7, "duplicates": 7}


def _segment(final, *, exit_code: int = 0):
    def make(i: int) -> Segment:
        code = f"import sys, time; time.sleep(1.0); sys.exit({exit_code})"
        return Segment([sys.executable, "-c", code], lambda: {"samples": 0}, final)
    return make


def _chain(make, kills: int = 2):
    return kill_chain("unit", make, kills=kills, seed=0, delay=(0.05, 0.2), env=dict(os.environ), attempt_timeout=60)


def test_kills_recover_when_the_restart_exits_0_with_the_reference_rows():
    record = _chain(_segment(lambda: {**compare_keys(REF, REF), "mismatches": []}))
    assert record["kills"] == 2 and record["recovered"] == 2 and record["failure"] is None
    assert record["points"][-1]["next_run"] == "exit 0" and all(p["recovered"] for p in record["points"])
    check_record(record, 2)


def test_a_restart_with_rows_missing_recovers_nothing():
    record = _chain(_segment(lambda: {**compare_keys(REF[:-1], REF), "mismatches": []}))
    assert record["kills"] == 2 and record["recovered"] == 0 and record["rows_lost"] == record["segments"]
    assert not any(p["recovered"] for p in record["points"])


def test_a_mismatch_outside_the_keys_recovers_nothing():
    record = _chain(_segment(lambda: {**compare_keys(REF, REF), "mismatches": ["run e is 'running'"]}), kills=1)
    assert record["recovered"] == 0 and record["mismatches"] == ["segment 0: run e is 'running'"]


def test_a_failing_restart_ends_the_chain_unrecovered():
    record = _chain(_segment(lambda: {**compare_keys(REF, REF), "mismatches": []}, exit_code=3), kills=1)
    assert record["kills"] == 1 and record["recovered"] == 0 and "exited 3" in record["failure"]
    assert record["points"][0]["next_run"] == "exit 3"
