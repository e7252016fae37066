"""``prl train``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from prl.generation.engines.base import check_model_dir
from prl import logs
from prl.training.config import add_run_arguments, run_config_from_args


def _cmd_train(args: argparse.Namespace) -> int:
    from prl.training.train import check_fresh_start  # deepspeed and transformers: when the command runs

    cfg = run_config_from_args(args)
    cfg.train.validate(cfg.algorithm, int(os.environ.get("WORLD_SIZE", "1")))
    check_model_dir(cfg.train.model)
    if not args.resume:
        check_fresh_start(cfg.train)  # one line, before Prefect starts
    from pathlib import Path

    logs.log_to(Path(cfg.train.out_dir) / "train.log")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.train import train

    with contextlib.redirect_stdout(sys.stderr):  # libraries print progress to stdout; it carries the result
        result = train(cfg, resume=args.resume, progress=not args.no_progress)
    print(json.dumps(result, indent=2, default=str))
    print(f"next: prl report --db {cfg.train.db}   (training curves: prl sql --db {cfg.train.db} "
          f"\"select step, name, value from train_metrics where run_id = '{result['run_id']}'\")", file=sys.stderr)
    return 0


def register(sub) -> None:
    """Add ``train`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "train",
        help="train with PRL / GRPO / Dr.GRPO / RAFT on DeepSpeed (Prefect flow, resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Train a policy as the paper does: per step, n rollouts per prompt (vLLM, weights reloaded in
place), Math-Verify rewards, old-policy and reference log-probs, advantages from prl_core for
the config's estimator, ppo_epochs of mini-batch PPO-clip updates through deepspeed.initialize,
per-step metrics (reward, accuracy, KL to the reference, entropy, clip fraction, rho, grad norm,
phase times) and per-segment S and rho into the store, a DeepSpeed checkpoint, and periodic
evaluations of the current policy stored as eval runs linked to the step.

The config file has an 'algorithm:' and a 'train:' section (configs/train/*.yaml); contradictory
settings are refused before anything starts. --resume continues from the last checkpoint with
the same step count and data order. Several processes: deepspeed --num_gpus N --module prl.training.train --config FILE.

example:
  prl train --config configs/train/tiny_prl.yaml --db runs/store.duckdb --steps 20
  prl train --config configs/train/tiny_prl.yaml --resume
""")
    add_run_arguments(p)  # the same options as the training script (prl.training.config)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)
