"""The main job through the real flows: `prl demo --small` killed mid-training and rerun, and the
deployment path (server → work pool → deploy → worker → run) on localhost."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import kill_when

from prl.store import Store

ROOT = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _steps(db: str, run_id: str) -> list[int]:
    return [r[0] for r in Store(db, create=False, lock_timeout_s=10).rows("train_steps_for_run", run_id=run_id)]


def test_pipeline_config_builds_twin_runs(tmp_path):
    from flows.pipeline import PipelineConfig, eval_config, train_config

    cfg = PipelineConfig(out_dir=str(tmp_path / "demo"))
    prl, grpo = train_config(cfg, "prl", "m"), train_config(cfg, "grpo", "m")
    # the twins differ only in the estimator: same seed, data, budget, sampling and optimiser
    assert {k: v for k, v in vars(prl.train).items() if k not in ("out_dir", "run_id")} == \
           {k: v for k, v in vars(grpo.train).items() if k not in ("out_dir", "run_id")}
    assert (prl.algorithm.estimator, grpo.algorithm.estimator) == ("prl", "grpo")
    assert prl.algorithm.n_samples == grpo.algorithm.n_samples and grpo.algorithm.step_split is None
    prl.train.validate(prl.algorithm)
    e = eval_config(cfg, "prl", "m")
    assert e.datasets[0] == "synth_test" and all(d.endswith(":20") for d in e.datasets[1:])
    assert e.run_id == "demo-eval-prl" and prl.train.run_id == "demo-train-prl"


@pytest.mark.e2e
def test_demo_killed_during_training_then_rerun_completes_without_duplicates(tmp_path):
    out = tmp_path / "demo"
    db = str(out / "store.duckdb")
    cmd = [sys.executable, "-m", "prl.cli", "demo", "--small", "--out", str(out), "--engine", "hf", "--no-progress"]
    kill_when(cmd, lambda: len(_steps(db, "demo-train-prl")) >= 2, cwd=ROOT, env=_env(), timeout_s=900,
              poll_s=0.2)  # the pipeline and its training subprocess
    killed_at = _steps(db, "demo-train-prl")
    assert killed_at[:2] == [1, 2]
    warm = out / "models" / "tiny-sft" / "model.safetensors"
    warm_mtime = warm.stat().st_mtime_ns

    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"prl dashboard --db {db}" in done.stdout and "paired comparison" in done.stdout
    assert warm.stat().st_mtime_ns == warm_mtime  # the warm start came from Prefect's cache, not retrained
    store = Store(db, create=False)
    assert _steps(db, "demo-train-prl") == [1, 2, 3] and _steps(db, "demo-train-grpo") == [1, 2, 3]
    for name in ("warm_start", "grpo", "prl"):
        run_id = f"demo-eval-{name}"
        counts = store.rows("stored_counts_for_run", run_id=run_id)
        assert len(counts) == 12 + 5 * 2 and {c for *_, c in counts} == {2}, run_id
        assert store.rows("get_run", run_id=run_id)[0][4] == "finished"
    with store.read() as con:
        dup = con.execute("select count(*) - count(distinct (run_id, dataset, problem_id, sample_idx)) "
                          "from samples").fetchall()
    assert dup == [(0,)]
    report = json.loads((out / "pipeline_report.json").read_text())
    assert set(report["runs"]) == {"warm_start", "grpo", "prl"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_deployment_on_a_local_server(tmp_path):
    """The README's sequence: server → work pool → deploy → worker → run (the report deployment)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from dashboard_seed import seed

    db = seed(tmp_path / "store.duckdb")
    port = _free_port()
    home = tmp_path / "prefect-home"
    env = _env(PREFECT_HOME=str(home), PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="1",
               PREFECT_LOGGING_LEVEL="INFO")
    prefect = str(Path(sys.executable).parent / "prefect")
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    worker = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = subprocess.run([prefect, "work-pool", "ls"], cwd=ROOT, env=env, capture_output=True, text=True)
            if r.returncode == 0:
                break
            time.sleep(1)
        assert r.returncode == 0, r.stderr[-2000:]
        r = subprocess.run([prefect, "work-pool", "create", "prl-local", "--type", "process"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([prefect, "--no-prompt", "deploy", "--all"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        for name in ("pipeline/pipeline", "train/train", "evaluate/evaluate", "report/report"):
            assert name.split("/")[0] in r.stdout, name
        worker = subprocess.Popen([prefect, "worker", "start", "--pool", "prl-local"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        r = subprocess.run([prefect, "deployment", "run", "report/report", "--param", f"db={db}", "--watch",
                            "--watch-timeout", "300"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert "Completed" in r.stdout + r.stderr
    finally:
        for p in (worker, server):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
