"""The main job's configuration and the deployment path (server → work pool → deploy → worker →
run) on localhost. The main job killed at random points and rerun: tests/faults/test_kill_pipeline.py."""

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
def test_deployments_and_checkpoint_trigger_on_a_local_server(tmp_path, tiny_model_dir):
    """The README's sequence: server → work pool → deploy → worker → run (the report deployment); then
    evaluation that follows training: a training run writing two checkpoints, its events, the
    automation prefect.yaml declares, and exactly two evaluation runs linked to the run and its steps."""
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
        _assert_registered_deployments(env)
        worker = subprocess.Popen([prefect, "worker", "start", "--pool", "prl-local"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        r = subprocess.run([prefect, "deployment", "run", "report/report", "--param", f"db={db}", "--watch",
                            "--watch-timeout", "300"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert "Completed" in r.stdout + r.stderr
        _checkpoint_trigger(tmp_path, tiny_model_dir, env, prefect)
    finally:
        for p in (worker, server):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)


DEPLOYMENTS = {  # flow/deployment → entrypoint: the README's and prefect.yaml's seven, nothing else
    "pipeline/pipeline": "flows/pipeline.py:pipeline", "train/train": "flows/train.py:train",
    "evaluate/evaluate": "flows/evaluate.py:evaluate", "report/report": "flows/report.py:report_flow",
    "study/study": "flows/study.py:study",
    "evaluate-checkpoint/evaluate-checkpoint": "flows/export_evaluation.py:evaluate_checkpoint",
    "evaluate-pending/evaluate-pending": "flows/export_evaluation.py:evaluate_pending"}
NIGHTLY = {"cron": "0 3 * * *", "timezone": "UTC", "active": True}  # evaluate-pending at 03:00 UTC, the only schedule

_READ_DEPLOYMENTS = """
import asyncio, json
from prefect.client.orchestration import get_client

async def main():
    async with get_client() as client:
        out = {}
        for d in await client.read_deployments():
            flow = await client.read_flow(d.flow_id)
            out[f"{flow.name}/{d.name}"] = {
                "entrypoint": d.entrypoint, "work_pool": d.work_pool_name,
                "schedules": [{"cron": getattr(s.schedule, "cron", None), "timezone": getattr(s.schedule, "timezone", None),
                               "active": s.active} for s in d.schedules]}
        print(json.dumps(out))

asyncio.run(main())
"""


def test_prefect_yaml_declares_the_deployments_and_the_nightly_schedule():
    """prefect.yaml, read as data: the seven deployments by name and entrypoint, all on the prl-local pool,
    and one schedule, evaluate-pending's nightly cron."""
    import yaml

    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    declared = {d["name"]: d for d in doc["deployments"]}
    assert {name: d["entrypoint"] for name, d in declared.items()} == {k.split("/")[1]: v for k, v in DEPLOYMENTS.items()}
    assert {d["work_pool"]["name"] for d in declared.values()} == {"prl-local"}
    assert {name: d.get("schedules", []) for name, d in declared.items() if d.get("schedules")} == {
        "evaluate-pending": [NIGHTLY]}


def _assert_registered_deployments(env) -> None:
    """What the server registered from `prefect deploy --all` (read back through its API): exactly the seven
    deployments, each from its entrypoint on prl-local, and the nightly schedule on evaluate-pending only."""
    r = subprocess.run([sys.executable, "-c", _READ_DEPLOYMENTS], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    registered = json.loads(r.stdout.strip().splitlines()[-1])
    assert {k: v["entrypoint"] for k, v in registered.items()} == DEPLOYMENTS
    assert {v["work_pool"] for v in registered.values()} == {"prl-local"}
    assert {k: v["schedules"] for k, v in registered.items() if v["schedules"]} == {
        "evaluate-pending/evaluate-pending": [NIGHTLY]}


def _checkpoint_trigger(tmp_path, model, env, prefect) -> None:
    """A trainer with PREFECT_API_URL set: two checkpoints → two prl.checkpoint.saved events → the
    evaluate-checkpoint automation runs the deployment once per event on the worker → two eval runs."""
    import yaml

    from prl.store.db import Store
    from prl.training.exports import CHECKPOINT_EVENT

    wide = {**env, "COLUMNS": "300"}  # Prefect's tables truncate cells ("CO…") to the terminal's width
    r = subprocess.run([prefect, "automation", "ls"], cwd=ROOT, env=wide, capture_output=True, text=True, timeout=120)
    assert "evaluate-checkpoint on prl.checkpoint.saved" in r.stdout, r.stdout[-2000:]
    db = tmp_path / "train-store.duckdb"
    cfg = {"algorithm": {"estimator": "grpo", "n_samples": 2},
           # engine hf (recorded in the exports, so the triggered evaluations use it too): the trigger is under
           # test; each of the four processes would import and start vLLM (~11 s)
           "train": {"model": str(model), "engine": "hf", "out_dir": str(tmp_path / "ckpt-run"), "db": str(db),
                     "run_id": "ckpt-run",
                     "steps": 2, "prompts_per_step": 2, "mini_batch_size": 4, "micro_batch_size": 4, "max_tokens": 16,
                     "checkpoint_every": 1, "eval_every": 0, "eval_datasets": ["synth_test:3"], "eval_n": 2,
                     "eval_limit": None, "segments_per_step": 1}}
    (tmp_path / "ckpt.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "prl_cli", "train", "--config", str(tmp_path / "ckpt.yaml")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (r.stdout + r.stderr).count(f"event {CHECKPOINT_EVENT} sent") == 2, (r.stdout + r.stderr)[-3000:]
    deadline, runs, completed = time.monotonic() + 420, [], 0
    while time.monotonic() < deadline:
        ls = subprocess.run([prefect, "flow-run", "ls", "--flow-name", "evaluate-checkpoint", "--limit", "20"],
                            cwd=ROOT, env=wide, capture_output=True, text=True, timeout=120)
        completed, failed = ls.stdout.count("COMPLETED"), ls.stdout.count("FAILED") + ls.stdout.count("CRASHED")
        assert not failed, ls.stdout
        if completed >= 2:
            break
        time.sleep(3)
    assert completed == 2, ls.stdout
    time.sleep(5)  # nothing more arrives: one flow run per event
    ls = subprocess.run([prefect, "flow-run", "ls", "--flow-name", "evaluate-checkpoint", "--limit", "20"],
                        cwd=ROOT, env=wide, capture_output=True, text=True, timeout=120)
    assert ls.stdout.count("COMPLETED") == 2 and "RUNNING" not in ls.stdout and "SCHEDULED" not in ls.stdout, ls.stdout
    store = Store(db, create=False)
    with store.read() as con:
        runs = con.execute("SELECT run_id, parent_run_id, train_step, status, (SELECT count(*) FROM samples s "
                           "WHERE s.run_id = r.run_id), json_extract_string(config, '$.model_fingerprint') "
                           "FROM runs r WHERE kind = 'eval' ORDER BY run_id").fetchall()
    fingerprints = [json.loads((tmp_path / "ckpt-run" / "exports" / f"step_{s:06d}" / "prl_export.json").read_text()
                               )["fingerprint"] for s in (1, 2)]
    assert [r[:5] for r in runs] == [("ckpt-run@step1", "ckpt-run", 1, "finished", 6),
                                     ("ckpt-run@step2", "ckpt-run", 2, "finished", 6)]  # 3 problems × n = 2, once
    assert [r[5] for r in runs] == fingerprints  # each run records the weights it evaluated

    # the nightly deployment: an export no evaluation covers (a copy under another run id) is evaluated,
    # the two covered ones are not
    import shutil

    copy = tmp_path / "pending" / "copy-run" / "exports" / "step_000001"
    shutil.copytree(tmp_path / "ckpt-run" / "exports" / "step_000001", copy)
    record = json.loads((copy / "prl_export.json").read_text())
    (copy / "prl_export.json").write_text(json.dumps({**record, "run_id": "copy-run", "path": str(copy)}))
    shutil.copytree(tmp_path / "ckpt-run", tmp_path / "pending" / "ckpt-run")  # already evaluated: skipped
    r = subprocess.run([prefect, "deployment", "run", "evaluate-pending/evaluate-pending", "--param",
                        f"root={tmp_path / 'pending'}", "--watch", "--watch-timeout", "300"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0 and "Completed" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    with store.read() as con:
        after = con.execute("SELECT run_id, parent_run_id, train_step, (SELECT count(*) FROM samples s "
                            "WHERE s.run_id = r.run_id) FROM runs r WHERE kind = 'eval' ORDER BY run_id").fetchall()
    assert after == [("ckpt-run@step1", "ckpt-run", 1, 6), ("ckpt-run@step2", "ckpt-run", 2, 6),
                     ("copy-run@step1", "copy-run", 1, 6)]
