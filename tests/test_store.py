"""The store's schema, views and named queries on an in-memory DuckDB: given rows → expected rows."""

from __future__ import annotations

import pytest

from prl.store.db import Store, load_queries


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
    assert {"upsert_run", "insert_incoming_samples", "insert_problem", "dataset_metrics_for_run",
            "stored_sample_keys"} <= set(q)
    assert all("$" in q[n] for n in ("insert_problem", "upsert_run"))


def test_every_named_query_is_run_by_the_code():
    """No dead SQL: each named query is named in prl, flows, dashboard or prl_cli (the bulk inserts
    ``insert_incoming_<table>`` by ``Store.insert_rows``' table argument)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = "".join(p.read_text() for d in ("prl", "flows", "dashboard", "prl_cli") for p in (root / d).rglob("*.py"))
    inserted = set(re.findall(r'insert_rows\("(\w+)"', code))
    unused = [n for n in load_queries() if not re.search(rf'["\']{n}["\']', code)
              and n.removeprefix("insert_incoming_") not in inserted]
    assert not unused, f"named queries no code runs: {unused}"


def test_views_from_given_rows(store):
    store.execute("upsert_run", run_id="r1", kind="eval", model="tiny", status="running", config={"n": 2},
              manifest={"seed": 0}, parent_run_id=None, train_step=None)
    rows = [sample("r1", "a", "a/1", 0, "correct"), sample("r1", "a", "a/1", 1, "wrong"),
            sample("r1", "a", "a/2", 0, "no_answer"), sample("r1", "a", "a/2", 1, "timeout"),
            sample("r1", "b", "b/1", 0, "correct"), sample("r1", "b", "b/1", 1, "correct")]
    assert store.insert_samples(rows) == 6
    assert store.rows("outcomes_for_runs", run_ids=["r1"]) == [
        ("r1", "a", "a/1", 2, 1), ("r1", "a", "a/2", 2, 0), ("r1", "b", "b/1", 2, 2)]
    assert store.rows("dataset_metrics_for_run", run_id="r1") == [("a", 2, 2, 0.25, 0.5), ("b", 1, 2, 1.0, 1.0)]
    assert ("r1", "a", "timeout", 1) in store.rows("verdict_counts_for_runs", run_ids=["r1"])


def test_writes_are_idempotent(store):
    rows = [sample("r1", "a", "a/1", i, "correct") for i in range(4)]
    assert store.insert_samples(rows) == 4
    assert store.insert_samples(rows + [sample("r1", "a", "a/1", 4, "wrong")]) == 1
    assert store.rows("count_samples")[0][0] == 5
    assert sorted(store.rows("stored_sample_keys", run_id="r1")) == [("a", "a/1", i) for i in range(5)]


def test_bad_verdicts_are_refused_and_nothing_is_half_written(store):
    rows = [sample("r1", "a", "a/1", 0, "correct"), sample("r1", "a", "a/1", 1, "maybe")]
    with pytest.raises(Exception, match="CHECK|constraint"):
        store.insert_samples(rows)
    assert store.rows("count_samples")[0][0] == 0


def test_suspicious_passes_view(store):
    rows = [sample("r1", "a", "a/1", 0, "correct"), sample("r1", "a", "a/1", 1, "correct"),
            sample("r1", "a", "a/2", 0, "correct"), sample("r1", "a", "a/2", 1, "wrong"),
            sample("r1", "a", "a/3", 0, "correct")]
    rel = [0.01, 0.05, None, 0.01, 0.5]
    only = [False, False, True, False, False]
    other = ["a/1", None, None, "a/9", "a/7"]  # a/1#0: low overlap but its own problem fits best: not flagged
    for r, x, o, f in zip(rows, rel, only, other):
        r.update(relevance=x, answer_only=o, best_fit=f)
    store.insert_samples(rows)
    # correct and (answer only, fits another problem better, or relevance < 0.15 where the fit is unknown):
    # a/2#0 (answer only), a/3#0 (fits a/7 better), a/1#1 (0.05, fit unknown); a/2#1 is wrong
    assert store.rows("suspicious_passes_for_run", run_id="r1", limit=10) == [
        ("a", "a/2", 0, None, True, None, None, 10), ("a", "a/3", 0, 0.5, False, "a/7", None, 10),
        ("a", "a/1", 1, 0.05, False, None, None, 10)]


def test_answer_styles_split_worked_from_direct_answers(store):
    worked, direct = "3 + 4 = 7\n\nThe answer is \\boxed{7}.", "The answer is \\boxed{7}."
    store.insert_samples([
        sample("r1", "s", "s/1", 0, "correct", response=worked), sample("r1", "s", "s/1", 1, "wrong", response=worked),
        sample("r1", "s", "s/2", 0, "correct", response=worked), sample("r1", "s", "s/2", 1, "wrong", response=direct),
        sample("r1", "t", "t/1", 0, "wrong", response="no steps = here? The answer is 5"),  # '=' before the answer
        sample("r2", "s", "s/1", 0, "correct", response=direct)])
    assert store.rows("answer_styles_for_run", run_id="r1") == [("s", 4, 0.75, 2 / 3, 0.0), ("t", 1, 1.0, 0.0, None)]
    assert store.rows("answer_styles_for_run", run_id="r2") == [("s", 1, 0.0, None, 1.0)]


def test_old_store_gains_new_columns(tmp_path):
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE samples (run_id VARCHAR NOT NULL, dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL, "
                "sample_idx INTEGER NOT NULL, response VARCHAR NOT NULL, extracted_answer VARCHAR, verdict VARCHAR NOT NULL, "
                "score DOUBLE NOT NULL, n_tokens INTEGER, finish_reason VARCHAR, verify_ms DOUBLE, "
                "PRIMARY KEY (run_id, dataset, problem_id, sample_idx))")
    con.execute("INSERT INTO samples VALUES ('r', 'a', 'a/1', 0, 'x', '1', 'correct', 1, 1, 'stop', 1)")
    con.close()
    s = Store(path)
    assert s.insert_samples([dict(sample("r", "a", "a/1", 1, "wrong"), relevance=0.5, answer_only=False)]) == 1
    assert s.rows("count_samples") == [(2,)]


def test_insert_samples_is_bulk_and_typed(store):
    rows = [dict(sample("r", "d", f"d/{i // 8}", i % 8, "correct" if i % 3 else "wrong"), relevance=i / 1000,
                 answer_only=i % 5 == 0) for i in range(800)]
    assert store.insert_samples(rows) == 800
    assert store.insert_samples(rows) == 0
    assert store.rows("dataset_metrics_for_run", run_id="r")[0][:3] == ("d", 100, 8)



def test_training_rows_go_in_as_one_table_typed_and_once(store):
    """A step's metrics (one NaN stored as NULL), segments and rollout (tokens as JSON) in one transaction;
    the same rows again add nothing, a failed transaction adds none of them."""
    metrics = [{"run_id": "t", "step": 1, "name": "reward/mean", "value": 0.25},
               {"run_id": "t", "step": 1, "name": "prl/rho_std", "value": None}]
    segments = [{"run_id": "t", "step": 1, "rollout_idx": 0, "segment_idx": j, "start_tok": 4 * j, "end_tok": 4 * j + 3,
                 "kl_to_go": 0.5 - 0.25 * j, "rho": -0.1 * j} for j in range(2)]
    rollout = [{"run_id": "t", "step": 1, "rollout_idx": 0, "problem": "1 + 1?", "gold": "2", "response": "\\boxed{2}",
                "reward": 1.0, "tokens": ["\\boxed{", "2}"]}]
    for _ in range(2):
        with store.write() as con:
            store.insert_rows("train_metrics", metrics, con)
            store.insert_rows("prl_segments", segments, con)
            store.insert_rows("train_rollouts", rollout, con)
    with store.read() as con:
        assert con.execute("SELECT name, value FROM train_metrics ORDER BY name").fetchall() == [
            ("prl/rho_std", None), ("reward/mean", 0.25)]
        assert con.execute("SELECT segment_idx, start_tok, end_tok, kl_to_go, rho FROM prl_segments ORDER BY 1"
                           ).fetchall() == [(0, 0, 3, 0.5, 0.0), (1, 4, 7, 0.25, -0.1)]
        assert con.execute("SELECT response, tokens->>'$[1]', reward FROM train_rollouts").fetchall() == [
            ("\\boxed{2}", "2}", 1.0)]
    with pytest.raises(RuntimeError):
        with store.write() as con:
            store.insert_rows("train_metrics", [{"run_id": "t", "step": 2, "name": "reward/mean", "value": 1.0}], con)
            raise RuntimeError("the step failed after its metrics")
    assert store.rows("train_steps_for_run", run_id="t") == [(1,)]


WRITER = r"""
import sys, time
from prl.store.db import Store
s = Store(sys.argv[1])
for chunk in range(int(sys.argv[2])):
    s.insert_samples([dict(run_id="w", dataset="d", problem_id=f"d/{chunk}", sample_idx=i, response="x" * 200,
                           extracted_answer="1", verdict="correct", score=1.0, n_tokens=5, finish_reason="stop",
                           verify_ms=1.0) for i in range(64)])
print("done", flush=True)
"""

HOLDER = r"""
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_readers_see_fresh_rows_while_another_process_writes(tmp_path):
    """A real concurrent writer: readers never get a lock error and see counts grow."""
    import subprocess
    import sys

    path = tmp_path / "busy.duckdb"
    reader = Store(path)
    chunks = 150
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(chunks)], stdout=subprocess.PIPE, text=True)
    seen = []
    while writer.poll() is None:
        seen.append(reader.rows("count_samples")[0][0])
        assert reader.rows("dataset_metrics_for_run", run_id="w") is not None
    assert writer.wait() == 0 and writer.stdout.read().strip() == "done"
    final = reader.rows("count_samples")[0][0]
    assert final == chunks * 64
    assert seen == sorted(seen)  # never goes backwards
    assert len(set(seen)) > 2, f"reads should interleave with the writer's chunks, saw {sorted(set(seen))[:10]}"
    assert all(c % 64 == 0 for c in seen)  # whole transactions only


def test_a_store_held_open_too_long_names_the_holder(tmp_path):
    import subprocess
    import sys

    from prl.store.db import StoreLocked

    path = tmp_path / "held.duckdb"
    Store(path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreLocked, match=r"held by another process for more than 0.5 s.*PID"):
            Store(path, lock_timeout_s=0.5, create=False).rows("count_samples")
    finally:
        holder.kill()
        holder.wait()
    assert Store(path, create=False).rows("count_samples") == [(0,)]  # usable again once released


READ_HOLDER = r"""
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)  # a reader in the middle of a long query
print("holding", flush=True)
sys.stdin.readline()
con.close()
"""

WRITE_HOLDER = READ_HOLDER.replace(", read_only=True)  # a reader in the middle of a long query",
                                   ")  # a writer in the middle of a transaction")

ONE_WRITE = WRITER.replace("s = Store(sys.argv[1])", "s = Store(sys.argv[1], create=False)\nprint('ready', flush=True)")


@pytest.fixture
def spawn():
    """Start ``python -c script args…`` (stdin/stdout piped); whatever is still running is killed at the end."""
    import subprocess
    import sys

    procs = []

    def start(script: str, *args) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True))
        return procs[-1]

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _holding(proc):
    assert proc.stdout.readline().strip() == "holding"
    return proc


def _release(holder) -> None:
    holder.stdin.write("\n")
    holder.stdin.flush()


def _in_thread(call):
    """Run ``call`` in a thread; returns (thread, results, errors)."""
    import threading

    got, errors = [], []

    def run():
        try:
            got.append(call())
        except Exception as e:  # reported by the test
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, got, errors


def _count(path) -> int:
    return Store(path, create=False).rows("count_samples")[0][0]


def _wait_for_the_turnstile(path, proc, why: str) -> None:
    """Return once some process holds ``<path>.write-intent`` exclusively (a waiter is queued)."""
    import fcntl
    import os
    import time

    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline and proc.poll() is None, why
        try:
            fd = os.open(str(path) + ".write-intent", os.O_RDONLY)
        except FileNotFoundError:
            time.sleep(0.01)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            return
        finally:
            os.close(fd)
        time.sleep(0.01)


def test_a_waiting_writer_goes_before_new_readers(tmp_path, spawn):
    """Readers that arrive while a writer waits for the file queue behind it, so a stream of
    dashboard queries cannot starve an evaluation: the late reader sees the writer's rows."""
    path = tmp_path / "turnstile.duckdb"
    Store(path)
    holder = _holding(spawn(READ_HOLDER, path))
    writer = spawn(ONE_WRITE, path, 1)
    _wait_for_the_turnstile(path, writer, "the writer never took its write intent")
    late, seen, errors = _in_thread(lambda: _count(path))
    late.join(0.5)
    assert late.is_alive(), f"a reader arriving behind a waiting writer went first (saw {seen}, {errors})"
    _release(holder)
    late.join(60)
    assert writer.wait(60) == 0 and writer.stdout.read().split() == ["ready", "done"]
    assert seen == [64] and not errors, "the late reader should see the writer's chunk"


def test_a_waiting_reader_goes_before_the_writers_next_transaction(tmp_path, spawn):
    """The mirror case: an evaluation writing chunk after chunk cannot starve a dashboard query.
    A reader that found the file busy is queued, so the next write waits for it: it sees 0 rows."""
    import time

    path = tmp_path / "turnstile.duckdb"
    Store(path)
    holder = _holding(spawn(WRITE_HOLDER, path))
    reader, seen, errors = _in_thread(lambda: _count(path))
    _wait_for_the_turnstile(path, holder, "the waiting reader never queued at the turnstile")
    writer = spawn(ONE_WRITE, path, 1)
    assert writer.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # the writer is now at the turnstile, behind the reader
    assert writer.poll() is None and reader.is_alive()
    _release(holder)
    reader.join(60)
    assert writer.wait(60) == 0 and writer.stdout.read().strip() == "done"
    assert seen == [0] and not errors, "the queued reader should get in before the writer's transaction"
    assert _count(path) == 64


def test_no_turnstile_file_possible_means_plain_retries(tmp_path, spawn):
    """Where the turnstile cannot be created (here a dangling link; a read-only folder in use),
    a process that finds the file busy still gets in once it is free, by retrying."""
    path = tmp_path / "plain.duckdb"
    Store(path)
    (tmp_path / "plain.duckdb.write-intent").symlink_to(tmp_path / "missing" / "intent")
    holder = _holding(spawn(WRITE_HOLDER, path))
    reader, got, errors = _in_thread(lambda: _count(path))
    reader.join(1.0)
    assert reader.is_alive() and not errors, errors  # waiting for the holder, not failed
    _release(holder)
    reader.join(60)
    assert got == [0] and not errors, errors
    Store(path, create=False).execute("upsert_run", run_id="r", kind="eval", model="m", status="done", config={},
                                      manifest={}, parent_run_id=None, train_step=None)
