"""Sharded evaluation: shard planning, Parquet shard files, ingestion, and the Ray task runner."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from prl.data.datasets import load_dataset
from prl.evaluation.config import EvalConfig, EvalError
from prl.evaluation.evaluate import run_evaluation
from prl.evaluation.shards import (ShardError, ingest_shard, leftover_shards, plan_shards, read_shard, shard_dir,
                        write_shard)
from prl.store.db import SAMPLE_COLUMNS, Store

ROOT = Path(__file__).resolve().parents[1]


def _rows(run_id: str, k: int, start: int = 0) -> list[dict]:
    return [{"run_id": run_id, "dataset": "synth_test", "problem_id": f"p{i // 2}", "sample_idx": i % 2,
             "response": f"r{i} <b>x</b> \\boxed{{{i}}}", "extracted_answer": str(i), "verdict": "wrong",
             "score": 0.0, "n_tokens": 7, "finish_reason": "stop", "verify_ms": 1.5, "relevance": 0.5,
             "answer_only": False} for i in range(start, start + k)]


def _samples(db, run_id):
    with Store(db, create=False).read() as con:
        return con.execute("select dataset, problem_id, sample_idx, response, verdict from samples "
                           "where run_id = $r order by all", {"r": run_id}).fetchall()


# ─── planning and files ───────────────────────────────────────────────────────────────────────

def test_shards_cover_the_pending_problems_in_order_with_stable_names():
    problems, _ = load_dataset("synth_test")
    pending = problems[:50]
    shards = plan_shards(pending, 16)
    assert [len(s.problems) for s in shards] == [16, 16, 16, 2]
    assert [p for s in shards for p in s.problems] == pending  # contiguous ranges, nothing lost or repeated
    assert shards[0].name.startswith("shard-000000-000015-") and shards[-1].name.startswith("shard-000048-000049-")
    assert [s.name for s in plan_shards(pending, 16)] == [s.name for s in shards]  # deterministic
    assert plan_shards(problems[1:51], 16)[0].name != shards[0].name  # other problems, other file
    with pytest.raises(ValueError, match="shard_problems"):
        plan_shards(pending, 0)


def test_shard_file_round_trips_and_ingests_idempotently(tmp_path):
    db = tmp_path / "s.duckdb"
    Store(db)
    path = write_shard(_rows("r1", 10), shard_dir(db, "r1") / "shard-a.parquet")
    assert path.parent == tmp_path / "shards" / "r1" and leftover_shards(path.parent) == [path]
    assert not list(path.parent.glob(".*tmp*"))  # the temporary name is gone after the rename
    table = read_shard(path, "r1")
    assert table.column_names == list(SAMPLE_COLUMNS) and table.num_rows == 10
    assert ingest_shard(db, "r1", path) == 10
    assert ingest_shard(db, "r1", path) == 0  # idempotent
    assert [r[3] for r in _samples(db, "r1")] == sorted(r["response"] for r in _rows("r1", 10))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "missing_column", "other_run"])
def test_a_damaged_shard_is_refused_by_name_and_nothing_stored_is_lost(tmp_path, damage):
    db = tmp_path / "s.duckdb"
    Store(db).insert_samples(_rows("r1", 6, start=100))  # already stored before the bad file arrives
    path = write_shard(_rows("r1", 10), tmp_path / "shard-x.parquet")
    if damage == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"PAR1 not really parquet \x00\xff" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "missing_column":
        pq.write_table(pq.read_table(path).drop(["verdict"]), path)
    else:
        write_shard(_rows("someone-else", 4), path)
    with pytest.raises(ShardError) as err:
        ingest_shard(db, "r1", path)
    assert str(path) in str(err.value)
    assert ("rerun" in str(err.value)) or ("move it" in str(err.value))  # the recovery path is named
    if damage == "missing_column":
        assert "verdict" in str(err.value)
    assert len(_samples(db, "r1")) == 6  # what was stored is intact


def test_ray_options_are_refused_without_the_ray_runner(tmp_path):
    with pytest.raises(EvalError, match="ray_address: only used with task_runner 'ray'"):
        EvalConfig(model=str(tmp_path), ray_address="auto")
    with pytest.raises(EvalError, match="task_runner: expected one of local, ray"):
        EvalConfig(model=str(tmp_path), task_runner="dask")
    with pytest.raises(EvalError, match="ray_cpus: sets the size of a local Ray runtime"):
        EvalConfig(model=str(tmp_path), task_runner="ray", ray_address="auto", ray_cpus=2)
    with pytest.raises(EvalError, match="shard_problems"):
        EvalConfig(model=str(tmp_path), task_runner="ray", shard_problems=0)


# ─── the sharded path, in process (no Ray): same samples as the chunked path ──────────────────

@pytest.mark.e2e
def test_sharded_run_stores_the_same_samples_as_the_chunked_run_and_resumes_from_files(tiny_model_dir, tmp_path):
    base = EvalConfig(model=str(tiny_model_dir), datasets=("synth_test:10", "amc23:3"), n=3, max_tokens=24,
                      db=str(tmp_path / "local.duckdb"), run_id="r", chunk_problems=4, verifier_workers=1,
                      engine_kwargs={"in_process": True})
    run_evaluation(base, progress=False, log=lambda *_: None)
    sharded = replace(base, db=str(tmp_path / "sharded.duckdb"), task_runner="ray", shard_problems=5)
    # Without a task runner the shards run one after another in this process: the Ray path's logic.
    summary = run_evaluation(sharded, progress=False, log=lambda *_: None)
    assert summary["shards"] == {"planned": 3, "failed": 0, "dir": str(tmp_path / "shards" / "r")}
    assert _samples(sharded.db, "r") == _samples(base.db, "r") and len(_samples(base.db, "r")) == 39

    # The driver died after the shard files were written but before they were stored: the rerun
    # stores them and generates nothing.
    with Store(sharded.db, create=False).write() as con:
        con.execute("delete from samples")
    lines: list[str] = []
    again = run_evaluation(sharded, progress=False, log=lines.append)
    assert again["generated_problems"] == 0 and again["samples_added"] == 0
    assert any("3 shard file(s) from earlier attempts read, 39 samples added" in line for line in lines)
    assert _samples(sharded.db, "r") == _samples(base.db, "r")


# ─── the Ray task runner, for real: a 2-CPU local Ray runtime, then a two-node Ray cluster ────

RAY_EVAL = ["--dataset", "synth_test:12,math500:4", "--n", "2", "--max-tokens", "24", "--run", "r", "--quiet",
            "--verifier-workers", "1"]
"""The evaluation both Ray tests run (run id ``r``); their samples are compared with :func:`in_process`'s."""


@pytest.fixture(scope="module")
def in_process(tiny_model_dir, tmp_path_factory, prefect_harness):
    """The samples of ``prl eval`` with :data:`RAY_EVAL` in one process, on the session's Prefect API: what the
    Ray runs must store. Made once for the module's two Ray tests."""
    from prefect.settings import PREFECT_API_URL

    ref_db = tmp_path_factory.mktemp("ray-ref") / "ref.duckdb"
    ref = subprocess.run([sys.executable, "-m", "prl_cli", "eval", "--model", str(tiny_model_dir), *RAY_EVAL,
                          "--db", str(ref_db)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()})
    assert ref.returncode == 0, ref.stderr[-3000:]
    samples = _samples(ref_db, "r")
    assert len(samples) == 32
    return samples


@pytest.mark.e2e
def test_prl_eval_on_a_local_ray_runtime_matches_the_in_process_run(tiny_model_dir, tmp_path, in_process):
    """`prl eval --task-runner ray --ray-cpus 2`: shards run as Prefect tasks in Ray workers, write
    Parquet files, and the driver stores them; the samples equal an in-process run's."""
    db = tmp_path / "ray.duckdb"
    args = ["--model", str(tiny_model_dir), *RAY_EVAL]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PREFECT_LOGGING_LEVEL": "INFO"}
    cmd = [sys.executable, "-m", "prl_cli", "eval", *args, "--db", str(db), "--task-runner", "ray",
           "--ray-cpus", "2", "--shard-problems", "8"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)
    assert summary["shards"]["planned"] == 2 and summary["samples_added"] == 32
    # Ray's and Prefect's own messages go to the run's log file (prl/log_routing.py), ours to the console
    said = done.stderr + (tmp_path / "logs" / "r.log").read_text()
    assert "Using Ray cluster with 1 nodes" in said and "eval-shard" in said
    assert said.count("Starting temporary server") == 1  # the workers report to the driver's server
    assert len(leftover_shards(tmp_path / "shards" / "r")) == 2
    assert _samples(db, "r") == in_process  # the reference ran on the session's Prefect API, not this temporary one
    assert Store(db, create=False).rows("get_run", run_id="r")[0][4] == "finished"

    # A shard file damaged after the fact: a clear one-line error naming it, the store intact.
    shard = leftover_shards(tmp_path / "shards" / "r")[0]
    shard.write_bytes(shard.read_bytes()[:100])
    bad = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    assert f"error: {shard}: not a readable Parquet shard" in bad.stderr and "delete" in bad.stderr
    assert len(_samples(db, "r")) == 32


@pytest.mark.e2e
def test_prl_eval_on_a_two_node_ray_cluster_runs_shards_on_both_nodes(tiny_model_dir, tmp_path, in_process):
    """A Ray cluster of two nodes on this host (Ray's own ``cluster_utils.Cluster``: a head and a second raylet,
    one CPU each) and `prl eval --task-runner ray --ray-address` joining it: the shards run as Ray tasks on
    both nodes (Ray's state API says where each ran), write their files to the shared --shard-dir, and the
    driver stores the samples an in-process run stores."""
    import ray
    from prefect.settings import PREFECT_API_URL
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": True})  # its state API
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        db = tmp_path / "ray.duckdb"
        args = ["--model", str(tiny_model_dir), *RAY_EVAL]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PREFECT_API_URL": PREFECT_API_URL.value()}
        done = subprocess.run([sys.executable, "-m", "prl_cli", "eval", *args, "--db", str(db), "--task-runner", "ray",
                               "--ray-address", cluster.address, "--shard-problems", "4",
                               "--shard-dir", str(tmp_path / "shared")], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        summary = json.loads(done.stdout)
        assert summary["shards"]["planned"] == 4 and summary["samples_added"] == 32
        assert len(leftover_shards(tmp_path / "shared" / "r")) == 4
        ray.init(address=cluster.address, logging_level="ERROR")
        try:
            from ray.util.state import list_nodes, list_tasks

            nodes = {n.node_id for n in list_nodes()}
            ran_on = {t.node_id for t in list_tasks(detail=True, limit=1000) if t.node_id}
        finally:
            ray.shutdown()
        assert len(nodes) == 2 and ran_on == nodes, (nodes, ran_on)
    finally:
        cluster.shutdown()
    assert _samples(db, "r") == in_process
