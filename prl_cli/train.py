"""``prl train``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from prl.generation.engines.base import check_model_dir, looks_like_hub_id
from prl import log_routing
from prl.options import add_config_arguments, option
from prl.training.config import add_run_arguments, estimators_epilog, run_config_from_args
from prl.training.memory import GPUS

from prl_cli.common import OutputOptions, check_store, run_flow, show_progress


@dataclass
class DryRunOptions:
    """`prl train --dry-run` and what it plans."""

    dry_run: bool = False
    """Print the plan of a GPU run of this config; start nothing."""
    gpus_per_node: int = 1
    """--dry-run: GPUs per node."""
    nodes: int = 1
    """--dry-run: nodes."""
    device: str | None = option(None, choices=("cpu", *GPUS))
    """--dry-run: the device one rank is planned on (default: cpu for float32 configs, H100-80GB for bfloat16 ones)."""
    format: str = option("table", choices=("table", "json"), was={"--json": "json"})
    """--dry-run: the plan as text with its tables, or as JSON."""
    plan_json: str | None = option(None, metavar="FILE")
    """--dry-run: also write the plan as JSON."""


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from prl.training import dry_run

    cfg = run_config_from_args(args)
    log_routing.log_to(Path(cfg.train.out_dir).with_name(Path(cfg.train.out_dir).name + ".dry-run.log"),
                       announce=not args.quiet)
    with contextlib.redirect_stdout(sys.stderr):  # library chatter off stdout, which carries the plan
        plan = dry_run.plan(cfg, gpus_per_node=args.gpus_per_node, nodes=args.nodes, device=args.device)
    print(json.dumps(plan, indent=2, default=str) if args.format == "json" else dry_run.render(plan))
    if args.plan_json:
        Path(args.plan_json).write_text(json.dumps(plan, indent=2, default=str) + "\n")
        print(f"[dry-run] plan written to {args.plan_json}", file=sys.stderr)
    model = cfg.train.model
    if not Path(model).exists() and looks_like_hub_id(model):  # planned from the shipped config.json alone
        print(f"note: {model} is a hub id: this plan needs no weights, but a run does, and prl downloads nothing: "
              f"`hf download {model} --local-dir models/{model.split('/')[1]}`, then train.model: "
              f"models/{model.split('/')[1]}", file=sys.stderr)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _cmd_dry_run(args)
    from prl.training.resume import check_fresh_start

    cfg = run_config_from_args(args)
    cfg.train.validate(cfg.algorithm, int(os.environ.get("WORLD_SIZE", "1")))
    check_model_dir(cfg.train.model)
    check_store(cfg.train.db, write=True)
    if not args.resume:
        check_fresh_start(cfg.train)  # one line, before Prefect starts
    from flows.train import train

    return run_flow(Path(cfg.train.out_dir) / "train.log",
                    lambda: train(cfg, resume=args.resume, progress=show_progress(args)), args=args,
                    next_hint=lambda result: f"prl report --db {cfg.train.db}   (training curves: prl sql --db "
                    f"{cfg.train.db} \"select step, name, value from train_metrics where run_id = '{result['run_id']}'\")")


def register(sub) -> None:
    """Add ``train`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "train",
        help="train with PRL / GRPO / Dr.GRPO / RAFT on DeepSpeed (Prefect flow, resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Train a policy as the paper does: per step, n rollouts per prompt (each rank's own vLLM engine in
its own process and device; the new weights handed to it from memory after every update),
Math-Verify rewards, old-policy and reference log-probs, advantages from prl_core for the config's
estimator, ppo_epochs of mini-batch PPO-clip updates through deepspeed.initialize, per-step metrics
(reward, accuracy, KL to the reference, entropy, clip fraction, rho, grad norm, time and peak memory
per phase) and per-segment S and rho into the store, a DeepSpeed checkpoint, and periodic
evaluations of the current policy (every rank generating a share) stored as eval runs linked to
the step.

The config file has an 'algorithm:' and a 'train:' section (configs/train/*.yaml) and optionally a
'monitors:' one (alerts at the onsets of a run going wrong: entropy collapse, KL acceleration,
reward hacking, all-equal groups, a mismatch-KL spike, NaN/inf; each a console line "[alert] ...",
a train_alerts row and a marker on the dashboard; on_alert: stop ends the run cleanly after a
checkpoint); contradictory settings are refused before anything starts. --estimator, --divergence,
--eta ... override the file's algorithm (--estimator drops the keys the new estimator does not read). --resume continues from the last checkpoint with
the same step count and data order. Several processes: deepspeed --num_gpus N --module prl.training.train --config FILE.

--dry-run starts nothing: it resolves and prints what a run of the config needs: the DeepSpeed
config; the memory of one rank term by term (model states from DeepSpeed's estimators, reference,
the rollout engine's share, activations measured on one layer of the model's own architecture, the
log-prob chunk, CUDA's overhead) in each phase of a step, and whether it FITS on --device, with what
to change when it does not; tokens per step; the chat template and how the tokenizer splits a
solution into steps. A hub id whose config.json ships in configs/models (Qwen/Qwen2.5-Math-1.5B,
Qwen/Qwen2.5-Math-7B) needs no download for the plan (a run needs the weights in a local directory:
prl downloads nothing). --format json prints the same plan as JSON.

example:
  prl train --config configs/train/tiny_prl.yaml --db runs/store.duckdb --steps 20
  prl train --config configs/train/tiny_prl.yaml --estimator frpo --divergence forward_kl --eta 20
  prl train --config configs/train/tiny_prl.yaml --resume
  prl train --config configs/train/paper_qwen2.5_math_1.5b.yaml --dry-run --gpus-per-node 4
  prl train --config configs/train/paper_qwen2.5_math_7b.yaml --dry-run --gpus-per-node 8 --device H100-80GB --format json
""")
    p.help_epilog = estimators_epilog  # at --help time: listing them imports torch
    add_run_arguments(p)  # the same options as the training script (prl.training.config)
    add_config_arguments(p, OutputOptions)
    add_config_arguments(p, DryRunOptions)
    p.set_defaults(func=_cmd_train)
