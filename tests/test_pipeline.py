"""The main job's configuration and the deployment path (server → work pool → deploy → worker →
run) on localhost. The main job killed at random points and rerun: tests/faults/test_kill_pipeline.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def test_pipeline_config_builds_twin_runs(tmp_path):
    from flows.config import PipelineConfig
    from flows.pipeline import eval_config, train_config

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
    # 16 prompts × 5 samples in 5 PPO mini-batches of 16
    assert (prl.train.mini_batch_size, prl.train.micro_batch_size) == (16, 16)


def test_pipeline_config_refuses_contradictions(tmp_path):
    from flows.config import PipelineConfig
    from prl_core.config import ConfigError

    with pytest.raises(ConfigError, match=r"updates_per_step: must divide the step's 80 rollouts"):
        PipelineConfig(out_dir=str(tmp_path), updates_per_step=3)
    with pytest.raises(ConfigError, match=r"direct_frac: expected a fraction in \[0, 1\)"):
        PipelineConfig(out_dir=str(tmp_path), direct_frac=-0.1)


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
