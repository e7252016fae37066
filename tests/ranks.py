"""Training runs on two CPU ranks with colocated vLLM engines, for the several-rank tests (tests/test_colocate.py,
tests/faults/test_kill_nodes.py): the config, the launchers users have (DeepSpeed's on one "node", torchrun on
two "nodes" of one rank each on this host) and what the ranks recorded (tests/ws2_probe.py).

Each run is made once per session (:func:`cached_run`): the one-node ZeRO-2 run serves test_colocate's own tests,
the two-node comparison and the kill-one-node chain as their reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "PRL_FAULT_POINT")
STEPS = 2
PROBE = str(ROOT / "tests" / "ws2_probe.py")


def cpu_has_bf16() -> bool:
    """bf16 arithmetic in hardware (AVX512-BF16 or AMX): where vLLM's CPU build and torch run bf16."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def easy_problems(tmp_path: Path) -> str:
    from prl.data import synthetic

    path = tmp_path / "easy.jsonl"
    rows = [r for r in synthetic.generate("train", 600, seed=0) if r["level"] <= 2][:200]
    path.write_text("".join(json.dumps({"problem": r["problem"], "answer": r["answer"]}) + "\n" for r in rows))
    return str(path)


def write_config(model: Path, tmp_path: Path, name: str, *, zero_stage: int, dtype: str) -> Path:
    """STEPS steps on 2 ranks with colocated vLLM engines (sleep level 2, in-memory sync, a checkpoint after
    every step, an evaluation at the end), run id ``name``, out_dir ``tmp_path/name``, store
    ``tmp_path/store.duckdb``."""
    cfg = {"algorithm": {"estimator": "prl", "eta": 10, "step_split": "fixed:8", "n_samples": 4,
                         # k1 KL to the reference: every update has a gradient whatever the rewards are
                         "kl_loss_coef": 0.1, "kl_estimator": "k1"},
           "train": {"model": str(model), "out_dir": str(tmp_path / name), "db": str(tmp_path / "store.duckdb"),
                     "run_id": name, "train_data": easy_problems(tmp_path), "steps": STEPS, "prompts_per_step": 4,
                     "max_tokens": 32, "engine": "vllm", "lr": 1e-3, "mini_batch_size": 8, "micro_batch_size": 4,
                     "checkpoint_every": 1, "segments_per_step": 2, "seed": 0, "zero_stage": zero_stage,
                     "dtype": dtype, "rollout_sleep_level": 2, "gradient_checkpointing": True,
                     "logprob_chunk_tokens": 16, "eval_datasets": ["synth_test"], "eval_limit": 6, "eval_n": 2,
                     "rollout_max_num_seqs": 24, "rollout_max_num_batched_tokens": 1024, "rollout_max_model_len": 256}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def base_env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in DIST_VARS}, "DS_ACCELERATOR": "cpu",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def start_torchrun_nodes(config: Path, tmp_path: Path, *, port: int, nodes: int = 2, resume: bool = False,
                         node_env: dict[int, dict[str, str]] | None = None) -> list[subprocess.Popen]:
    """``nodes`` torchrun "nodes" of one rank each on this host (``--nnodes N --node-rank K``: RANK = K,
    LOCAL_RANK = 0 on every node), each in its own process group (one node can be killed whole) with its own
    node-local scratch (TMPDIR, caches); the store and out_dir sit on the shared path the config names.
    ``node_env``: extra variables for a node (a fault point on one node only)."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    procs = []
    for node in range(nodes):
        scratch = tmp_path / f"node{node}-scratch"  # node-local: temporary files and caches of that node only
        scratch.mkdir(exist_ok=True)
        env = {**base_env(), "TMPDIR": str(scratch), "XDG_CACHE_HOME": str(scratch / "cache"),
               "TORCH_EXTENSIONS_DIR": str(scratch / "torch_extensions"), **(node_env or {}).get(node, {})}
        procs.append(subprocess.Popen(
            [torchrun, "--nnodes", str(nodes), "--node-rank", str(node), "--nproc-per-node", "1",
             "--master-addr", "127.0.0.1", "--master-port", str(port), PROBE, "--config", str(config), "--quiet",
             *(["--resume"] if resume else [])],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
    return procs


def wait_nodes(procs: list[subprocess.Popen], timeout: float = 600) -> list[tuple[int, str]]:
    """(returncode, the last of stdout+stderr) of each node; a node still running after ``timeout`` s is killed
    with its process group, then reported."""
    out = []
    for pr in procs:
        try:
            o, e = pr.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(pr.pid, signal.SIGKILL)
            o, e = pr.communicate()
        try:  # anything the node's torchrun left behind (its worker, the worker's engine)
            os.killpg(pr.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out.append((pr.returncode, (o + e)[-4000:]))
    return out


def read_run(tmp_path: Path, name: str) -> dict[str, Any]:
    """What a finished run left: the store, its metrics by step, its manifest, what each rank recorded."""
    from prl.store.db import Store

    ranks = tmp_path / name / "ranks"
    db = Store(tmp_path / "store.duckdb", create=False)
    metrics: dict[int, dict[str, float]] = {}
    for _run, step, metric, value in db.rows("train_metrics_for_runs", run_ids=[name]):
        metrics.setdefault(step, {})[metric] = value
    return {"name": name, "db": db, "db_path": tmp_path / "store.duckdb", "metrics": metrics, "out": tmp_path / name,
            "manifest": json.loads(db.rows("get_run", run_id=name)[0][6]),
            "updates": [json.loads((ranks / f"rank{k}.json").read_text()) for k in (0, 1)],
            "engines": [json.loads((ranks / f"engine{k}.json").read_text()) for k in (0, 1)]}


def run_two_ranks(model: Path, tmp_path: Path, *, zero_stage: int, dtype: str, port: int, nodes: int = 1) -> dict:
    """Train on 2 ranks (:func:`write_config`); returns :func:`read_run`'s record.

    ``nodes=1``: DeepSpeed's launcher, one "node" of two ranks. ``nodes=2``: :func:`start_torchrun_nodes`."""
    name = f"z{zero_stage}" + ("" if nodes == 1 else f"-{nodes}nodes")
    path = write_config(model, tmp_path, name, zero_stage=zero_stage, dtype=dtype)
    if nodes == 1:
        launcher = str(Path(sys.executable).parent / "deepspeed")
        r = subprocess.run([launcher, "--num_gpus", "2", "--master_port", str(port), PROBE, "--config", str(path),
                            "--quiet"], cwd=ROOT, env=base_env(), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    else:
        for rc, tail in wait_nodes(start_torchrun_nodes(path, tmp_path, port=port, nodes=nodes)):
            assert rc == 0, tail
    return read_run(tmp_path, name)


_RUNS: dict[tuple, dict] = {}
"""The session's several-rank training runs, each made once."""


def cached_run(warm_model, tmp_path_factory, zero_stage: int, dtype: str, nodes: int = 1) -> dict:
    key = (zero_stage, dtype, nodes)
    if key not in _RUNS:
        model, _ = warm_model
        _RUNS[key] = run_two_ranks(model, tmp_path_factory.mktemp(f"zero{zero_stage}-{nodes}n"), zero_stage=zero_stage,
                                   dtype=dtype, port=29517 + zero_stage + 10 * (nodes - 1), nodes=nodes)
    return _RUNS[key]
