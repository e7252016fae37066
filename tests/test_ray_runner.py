"""The Ray task runner of the commands the README documents it for, for real (a local Ray runtime under
Prefect): `prl demo --small --task-runner ray` and a two-job `prl study --task-runner ray`.

`prl eval --task-runner ray` itself is tests/test_shards.py; here the question is whether the demo and
the study reach it and store what the in-process runs store, value for value.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prl.store.db import Store
from tests.study_configs import small_study

ROOT = Path(__file__).resolve().parents[1]
EVAL_RUNS = ("demo-eval-warm_start", "demo-eval-grpo", "demo-eval-prl")
SAMPLE_VALUES = ("run_id, dataset, problem_id, sample_idx, response, extracted_answer, verdict, score, n_tokens, "
                 "finish_reason, relevance, answer_only, best_fit, verdict_detail")


def _env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    return {**env, "PREFECT_API_URL": PREFECT_API_URL.value(), "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}


def _rows(db: Path, sql: str, **params) -> list[tuple]:
    with Store(db, create=False).read() as con:
        return con.execute(sql, params).fetchall()


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_demo_evaluations_on_ray_store_the_in_process_samples(small_demo, tmp_path):
    """The small demo's output copied, its three evaluation runs deleted, then `prl demo --small --task-runner
    ray` on the copy: data, model and warm start come back from their files (same seed, same bytes), training
    is already finished (resumed, no step redone), and the evaluations run as shards on Ray workers: every
    sample equals the in-process demo's, value for value, and the training rows are untouched."""
    local = small_demo["out"]
    assert small_demo["result"].returncode == 0, small_demo["result"].stderr[-4000:]
    out = tmp_path / "demo"  # the run ids derive from the directory's name: keep it
    shutil.copytree(local, out)
    db = out / "store.duckdb"
    expected = _rows(db, f"select {SAMPLE_VALUES} from samples where run_id like 'demo-eval-%' order by all")
    train_before = _rows(db, "select run_id, step, name, value from train_metrics where name not like 'time/%' "
                             "and name not like 'memory/%' order by all")
    assert len(expected) == 3 * (12 + 5 * 2) * 2 and train_before
    with Store(db).write() as con:
        for table in ("samples", "runs"):
            con.execute(f"delete from {table} where run_id like 'demo-eval-%'")
    (out / "pipeline_report.json").unlink()

    r = subprocess.run([sys.executable, "-m", "prl_cli", "demo", "--small", "--out", str(out), "--task-runner", "ray"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=850)
    assert r.returncode == 0, r.stderr[-4000:]

    got = _rows(db, f"select {SAMPLE_VALUES} from samples where run_id like 'demo-eval-%' order by all")
    assert got == expected
    for run_id in EVAL_RUNS:  # they ran on the Ray runner: its config says so and its shard files are there
        status, config = _rows(db, "select status, config from runs where run_id = $r", r=run_id)[0]
        assert status == "finished" and json.loads(config)["task_runner"] == "ray"
        assert list((out / "shards" / run_id).glob("*.parquet")), f"{run_id}: no shard file"
    train_after = _rows(db, "select run_id, step, name, value from train_metrics where name not like 'time/%' "
                            "and name not like 'memory/%' order by all")
    assert train_after == train_before
    report = json.loads((out / "pipeline_report.json").read_text())
    assert report["runs"] == {"warm_start": EVAL_RUNS[0], "grpo": EVAL_RUNS[1], "prl": EVAL_RUNS[2]}


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_two_job_study_on_ray_runs_each_job_as_a_ray_task(tmp_path, warm_model):
    """`prl study --task-runner ray` on 2 cells × 1 seed: both jobs run as Ray tasks (prefect-ray's runner, a
    local Ray runtime), each trains its 2 steps and stores its evaluation, and the report is written."""
    config = small_study(tmp_path, warm_model[0], study_id="duo", seeds=(0,))
    r = subprocess.run([sys.executable, "-m", "prl_cli", "study", "--config", str(config), "--task-runner", "ray"],
                       cwd=ROOT, env={**_env(), "PREFECT_LOGGING_LEVEL": "INFO"},
                       capture_output=True, text=True, timeout=850)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    result = json.loads(r.stdout[r.stdout.index("{"):])
    assert (result["jobs"], result["ran"], result["skipped"]) == (2, 2, 0)
    db = tmp_path / "study" / "store.duckdb"
    store = Store(db, create=False)
    jobs = store.records("study_cells_for_study", study_id="duo")
    assert [(j["cell"], j["seed"], j["status"], j["train_status"], j["eval_status"]) for j in jobs] == [
        ("grpo", 0, "finished", "finished", "finished"), ("prl", 0, "finished", "finished", "finished")]
    steps = _rows(db, "select run_id, list(distinct step order by step) from train_metrics group by 1 order by 1")
    assert steps == [("duo.grpo.s0", [1, 2]), ("duo.prl.s0", [1, 2])]
    samples = dict(_rows(db, "select run_id, count(*) from samples group by 1"))
    assert samples == {"duo.grpo.s0@step2": 12, "duo.prl.s0@step2": 12}
    logs = "\n".join(p.read_text(errors="replace") for p in (tmp_path / "study").rglob("*.log")) + r.stderr
    assert "Using Ray cluster with 1 nodes" in logs, logs[-3000:]  # prefect-ray's runner started the jobs
    assert (tmp_path / "study" / "study_report.json").is_file()
