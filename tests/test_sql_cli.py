"""`prl sql`: read-only, no files, no network, no extensions; results as table/CSV/JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prl.store.readonly import QueryRefused, run_query
from prl.store.db import Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "store.duckdb"
    with Store(path) as s:
        s.insert_samples([dict(run_id="r1", dataset="a", problem_id=f"a/{i}", sample_idx=0, response="<script>x</script>",
                               extracted_answer="1", verdict="correct" if i % 2 else "wrong", score=float(i % 2),
                               n_tokens=3, finish_reason="stop", verify_ms=1.0) for i in range(4)])
    (tmp_path / "secret.csv").write_text("a,b\n1,2\n")
    return path


def test_select_works(db):
    cols, rows = run_query(db, "select verdict, count(*) as n from samples group by 1 order by 1")
    assert cols == ["verdict", "n"] and rows == [("correct", 2), ("wrong", 2)]


@pytest.mark.parametrize("sql, pattern", [
    ("insert into samples (run_id, dataset, problem_id, sample_idx, response, verdict, score) "
     "values ('r', 'a', 'p', 9, 'x', 'correct', 1)", "read-only|read only"),
    ("delete from samples", "read-only|read only"),
    ("create table t (x int)", "read-only|read only"),
    ("attach 'other.duckdb'", "ATTACH is not allowed"),
    ("copy samples to 'out.csv'", "COPY is not allowed"),
    ("install httpfs", "INSTALL is not allowed"),
    ("load httpfs", "LOAD is not allowed"),
    ("set enable_external_access = true", "SET is not allowed"),
    ("select 1; drop table samples", "exactly one statement"),
])
def test_writes_and_escapes_are_refused(db, sql, pattern):
    with pytest.raises(QueryRefused, match=pattern):
        run_query(db, sql)


def test_local_files_and_network_are_unreachable(db, tmp_path):
    for sql in (f"select * from read_csv('{tmp_path / 'secret.csv'}')", "select * from read_text('/etc/hostname')",
                "select * from read_parquet('http://127.0.0.1:9/x.parquet')"):
        with pytest.raises(QueryRefused, match="disabled|external access|Permission"):
            run_query(db, sql)
    assert Store(db, create=False).rows("count_samples") == [(4,)]  # nothing changed


def test_long_queries_are_cut_off(db):
    with pytest.raises(QueryRefused, match="longer than 0.5 s"):
        run_query(db, "select count(*) from range(1000000000000) a", timeout_s=0.5)


def test_cli_formats(db):
    r = subprocess.run([sys.executable, "-m", "prl_cli", "sql", "--db", str(db), "--format", "json",
                        "select problem_id, response from samples order by 1 limit 1"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"problem_id": "a/0", "response": "<script>x</script>"}]
    r = subprocess.run([sys.executable, "-m", "prl_cli", "sql", "--db", str(db), "drop table samples"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "error: sql:" in r.stderr


def test_ctrl_c_inside_a_query_is_the_interrupt_not_a_timeout(db):
    """Ctrl-C while DuckDB runs the query: DuckDB turns the KeyboardInterrupt into `RuntimeError: Query interrupted`
    (which `prl sql` also gets from its own timeout); the command still reports the Ctrl-C: one line, exit 130, at
    once (DuckDB waits for the query's running task unless the connection is interrupted: before
    prl.store.readonly.interrupted_by_ctrl_c, this query ran on after the Ctrl-C, 4 of 6 times). Found when a Ctrl-C
    landed inside `prl eval`'s store write: a traceback instead of the line."""
    import os
    import signal
    import time

    import psutil

    long = "select count(*) from range(1000000000000) a"  # hours of work
    proc = subprocess.Popen([sys.executable, "-m", "prl_cli", "sql", "--db", str(db), "--timeout-s", "300", long],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # inside the query: its threads are computing
            t = ps.cpu_times()
            if t.user + t.system > 3.0:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted (rerun the same command to resume)"], err
