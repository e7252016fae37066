"""The kill chains' figures are measured: `recovered` follows the runs after each kill and the stage each kill
showed, lost, extra and duplicated rows come from comparing key multisets and differing rows from comparing
values, so a broken recovery shows up in them (seconds: a Python process that reaches a fault point stands in
for the command)."""

from __future__ import annotations

import os
import sys

import pytest
from chain import Aim, Segment, check_record, compare_keys, kill_chain, store_keys

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


def test_values_are_compared_and_differences_bounded(tmp_path):
    """Same keys, other values: each differing row counts once, with the largest difference per column; the values
    of measured metrics (time/, memory/) are not compared."""
    from chain import compare_rows, store_rows

    _fill(tmp_path / "ref.duckdb", {"e": 2})
    _fill(tmp_path / "got.duckdb", {"e": 2})
    ref = store_rows(tmp_path / "ref.duckdb")
    assert compare_rows(tmp_path / "got.duckdb", ref)["values_differ"] == 0
    with Store(tmp_path / "got.duckdb").write() as con:
        con.execute("update samples set response = 'other' where sample_idx = 1")
        con.execute("update train_metrics set value = 0.75 where step = 2")
        con.execute("insert into train_metrics values ('e', 1, 'time/step', 1.0)")
    with Store(tmp_path / "ref.duckdb").write() as con:
        con.execute("insert into train_metrics values ('e', 1, 'time/step', 2.0)")
    ref = store_rows(tmp_path / "ref.duckdb")
    got = compare_rows(tmp_path / "got.duckdb", ref)
    assert got["values_differ"] == 2 and got["rows_lost"] == got["rows_extra"] == 0
    assert got["rows_compared"] == sum(len(v) for v in ref.values()) - 1  # all but time/step
    assert got["differences"]["train_metrics"]["max_abs_diff"] == {"train_metrics:reward/mean": 0.25}
    assert got["differences"]["samples"]["first"] == [["e", "d", "p1", "1"]]


def _segment(final, aims, *, stage="s", exit_code=0):
    """A command that reaches the fault point eval/generate (key e) three times, then exits ``exit_code``."""
    code = ("import sys, time\nfrom prl.fault_points import fault_point\nfor i in range(3):\n"
            "    time.sleep(0.1)\n    fault_point('eval/generate', 'e')\n" f"sys.exit({exit_code})\n")

    def make(i: int, rng) -> Segment:
        return Segment([sys.executable, "-c", code], aims, lambda: {"stage": stage}, final)
    return make


def _chain(make, kills: int = 2):
    return kill_chain("unit", make, kills=kills, seed=0, env=dict(os.environ), attempt_timeout=60)


SAME = lambda: {**compare_keys(REF, REF), "rows_compared": 4, "values_differ": 0, "mismatches": []}  # noqa: E731
AIMS = [Aim("eval/generate@e:2", "second call", "s"), Aim("eval/generate@e:3", "third call", "s")]


def test_kills_recover_when_the_restart_exits_0_with_the_reference_rows():
    record = _chain(_segment(SAME, AIMS))
    assert record["kills"] == 2 and record["recovered"] == 2 and record["failure"] is None
    assert [p["next_run"] for p in record["points"]] == ["killed", "exit 0"] and all(p["recovered"] for p in record["points"])
    assert record["stages"] == {"second call": {"kills": 1, "recovered": 1, "stage_as_aimed": 1},
                                "third call": {"kills": 1, "recovered": 1, "stage_as_aimed": 1}}
    check_record(record, 2)


def test_a_kill_that_shows_another_stage_recovers_nothing():
    record = _chain(_segment(SAME, AIMS, stage="elsewhere"))
    assert record["kills"] == 2 and record["recovered"] == 0
    assert record["mismatches"][0].startswith("segment 0: aimed at eval/generate@e:2 ('s'); the store and files show")
    with pytest.raises(AssertionError):
        check_record(record, 2)


def test_a_kill_point_never_reached_ends_the_chain():
    record = _chain(_segment(SAME, [Aim("eval/generate@e:9", "never", "s")]), kills=1)
    assert record["kills"] == 0 and "was not killed there (exit 0)" in record["failure"]


def test_a_restart_with_rows_missing_or_values_different_recovers_nothing():
    lost = _chain(_segment(lambda: {**compare_keys(REF[:-1], REF), "rows_compared": 3, "values_differ": 0,
                                    "mismatches": []}, AIMS))
    assert lost["kills"] == 2 and lost["recovered"] == 0 and lost["rows_lost"] == lost["segments"]
    differ = _chain(_segment(lambda: {**compare_keys(REF, REF), "rows_compared": 4, "values_differ": 1,
                                      "mismatches": []}, AIMS))
    assert differ["recovered"] == 0 and differ["values_differ"] == differ["segments"]


def test_a_mismatch_outside_the_rows_recovers_nothing():
    record = _chain(_segment(lambda: {**SAME(), "mismatches": ["run e is 'running'"]}, AIMS[:1]), kills=1)
    assert record["recovered"] == 0 and record["mismatches"] == ["segment 0: run e is 'running'"]


def test_a_failing_restart_ends_the_chain_unrecovered():
    record = _chain(_segment(SAME, AIMS[:1], exit_code=3), kills=1)
    assert record["kills"] == 1 and record["recovered"] == 0 and "exited 3" in record["failure"]
    assert record["points"][0]["next_run"] == "exit 3"
