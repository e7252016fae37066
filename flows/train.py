"""The ``train`` flow: PRL (or GRPO, Dr.GRPO, RAFT) training on DeepSpeed with every step in the store.

The loop is one plain script, :mod:`prl.training.train`, that runs once per rank (DeepSpeed's
launcher starts several). This flow writes the run's config file and launches the script in its
own process, as the launcher would: the process group, the rollout engine and their memory live
and die with it, and a retry resumes from the last checkpoint. The script's periodic evaluations
are eval runs in the store linked to the training run and step.

Several processes: ``deepspeed --num_gpus N --module prl.training.train --config FILE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.logs import log as _log

from prl.training.config import RunConfig

DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def write_config(rc: RunConfig) -> Path:
    """The run's full config as ``<out_dir>.yaml`` beside its output directory (what the script reads)."""
    out = Path(rc.train.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = out.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(json.loads(json.dumps(rc.to_dict(), default=list)), sort_keys=False))
    return config


def launch(rc: RunConfig, *, resume: bool, progress: bool) -> dict[str, Any]:
    """Run ``python -m prl.training.train`` on the run's config; returns the script's result (its last
    stdout line). Its progress bar and step lines go to this process's stderr."""
    config = write_config(rc)
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    _log(f"training {rc.train.resolved_run_id} ({rc.algorithm.estimator}, {rc.train.steps} steps) → {rc.train.out_dir}; "
         f"config {config}")
    cmd = [sys.executable, "-m", "prl.training.train", "--config", str(config)]
    cmd += ["--resume"] * resume + ["--no-progress"] * (not progress)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"training {rc.train.run_id} failed (exit {proc.returncode}); rerun to resume it "
                           f"from {Path(rc.train.out_dir) / 'checkpoints'}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    _log(f"trained {rc.train.resolved_run_id}: {result['steps']} steps"
         + (f" (resumed after step {result['resumed_from_step']})" if result.get("resumed_from_step") else ""))
    return result


@task(name="train-run", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=5)
def train_run(rc: RunConfig, resume: bool = True, progress: bool = False) -> dict[str, Any]:
    """One training run in its own process; safe to retry (it resumes from its last checkpoint)."""
    return launch(rc, resume=resume, progress=progress)


@flow(name="train", log_prints=False)
def train(cfg: RunConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train for ``cfg.train.steps`` steps (continuing from the last checkpoint with ``resume``)."""
    return launch(cfg, resume=resume, progress=progress)
