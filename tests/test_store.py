"""The store's schema, views and named queries on an in-memory DuckDB: given rows → expected rows."""

from __future__ import annotations

import pytest

from prl.store import Store, load_queries


def sample(run, ds, pid, idx, verdict, **kw):
    return dict(run_id=run, dataset=ds, problem_id=pid, sample_idx=idx, response=kw.get("response", "r"),
                extracted_answer=kw.get("extracted"), verdict=verdict, score=1.0 if verdict == "correct" else 0.0,
                n_tokens=10, finish_reason="stop", verify_ms=1.0)


@pytest.fixture
def store():
    with Store(":memory:") as s:
        yield s


def test_named_queries_load_and_are_unique():
    q = load_queries()
    assert {"upsert_run", "insert_sample", "insert_problem", "dataset_metrics_for_run", "stored_sample_keys"} <= set(q)
    assert all("$" in q[n] for n in ("insert_sample", "upsert_run"))


def test_views_from_given_rows(store):
    store.run("upsert_run", run_id="r1", kind="eval", model="tiny", status="running", config={"n": 2},
              manifest={"seed": 0}, parent_run_id=None, train_step=None)
    rows = [sample("r1", "a", "a/1", 0, "correct"), sample("r1", "a", "a/1", 1, "wrong"),
            sample("r1", "a", "a/2", 0, "no_answer"), sample("r1", "a", "a/2", 1, "timeout"),
            sample("r1", "b", "b/1", 0, "correct"), sample("r1", "b", "b/1", 1, "correct")]
    assert store.insert_samples(rows) == 6
    assert store.rows("problem_outcomes_for_run", run_id="r1") == [
        ("a", "a/1", 2, 1, 0.5), ("a", "a/2", 2, 0, 0.0), ("b", "b/1", 2, 2, 1.0)]
    assert store.rows("dataset_metrics_for_run", run_id="r1") == [("a", 2, 2, 0.25, 0.5), ("b", 1, 2, 1.0, 1.0)]
    assert ("a", "timeout", 1) in store.rows("verdict_counts", run_id="r1")


def test_writes_are_idempotent(store):
    rows = [sample("r1", "a", "a/1", i, "correct") for i in range(4)]
    assert store.insert_samples(rows) == 4
    assert store.insert_samples(rows + [sample("r1", "a", "a/1", 4, "wrong")]) == 1
    assert store.con.execute("SELECT count(*) FROM samples").fetchone()[0] == 5
    assert sorted(store.rows("stored_sample_keys", run_id="r1")) == [("a", "a/1", i) for i in range(5)]


def test_bad_verdicts_are_refused_and_nothing_is_half_written(store):
    rows = [sample("r1", "a", "a/1", 0, "correct"), sample("r1", "a", "a/1", 1, "maybe")]
    with pytest.raises(Exception, match="CHECK|constraint"):
        store.insert_samples(rows)
    assert store.con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
