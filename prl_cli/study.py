"""``prl study``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from prl.evaluation.config import TASK_RUNNERS
from prl.options import add_config_arguments, option

from prl_cli.common import OutputOptions, check_store, run_flow, show_progress


@dataclass
class StudyOptions:
    """`prl study`'s options (the study itself is the config file's)."""

    config: str
    """Study YAML (configs/study/*.yaml)."""
    study: str | None = option(None, metavar="ID", was=("--study-id",))
    """Study id (default: the config's study.id)."""
    task_runner: str = option("local", choices=TASK_RUNNERS)
    """Run the jobs in threads of this process (local) or as Ray tasks (ray; pip install -e '.[ray]')."""
    ray_address: str | None = None
    """With --task-runner ray: a Ray cluster to join (default: start a local runtime)."""
    dry_run: bool = False
    """Check the config and print the jobs; start nothing."""
    gpus_per_node: int = 0
    """--dry-run: also plan one job's GPU run (memory, batch) on this many GPUs per node (default: no plan)."""
    nodes: int = 0
    """--dry-run: nodes of that plan (default 1)."""


def _dry_run(study, args) -> int:
    from prl.studies.config import config_differences, implied_keys

    s = study.settings
    print(f"study {study.id}: {len(study.cells)} cells × {len(s.seeds)} seeds {list(s.seeds)} = {len(study.jobs())} "
          f"jobs; baseline {study.baseline}; concurrency {s.concurrency}; store {s.store}")
    print(f"evaluation: {', '.join(s.eval.datasets)}, n = {s.eval.n}, limit {s.eval.limit or 'all'} per data set")
    print(f"base model: {'tiny model warm-started for the study (' + str(s.warm_start.sft_steps) + ' SFT steps)' if s.warm_start else study.cells[0].run.train.model}")
    planned = {c.name: study.cell_config(c, s.seeds[0], c.run.train.model or "<warm start>").to_dict()
               for c in study.cells}
    diffs = config_differences(planned)
    allowed = implied_keys(set().union(*(set(c.varied) for c in study.cells)))
    print("\ncells (the keys each sets over the base):")
    for c in study.cells:
        a = c.run.algorithm
        print(f"  {c.name:<24} {a.estimator:<8} " + ", ".join(f"{k}={_value(planned[c.name], k)}" for k in c.varied))
    print("\nkeys that differ between cells: " + (", ".join(diffs) or "none"))
    bad = sorted(k for k in diffs if k not in allowed)
    if bad:
        print(f"WARNING: {', '.join(bad)} differ although no cell declares them")
    if args.gpus_per_node or args.nodes:
        from prl.training import dry_run

        with contextlib.redirect_stdout(sys.stderr):
            first = next((c for c in study.cells if c.run.algorithm.estimator == "prl"), study.cells[0])
            plan = dry_run.plan(study.cell_config(first, s.seeds[0], first.run.train.model),
                                gpus_per_node=args.gpus_per_node or 1, nodes=args.nodes or 1)
        print(f"\nplan of one job ({first.name}; every cell has the same model, batch and lengths):")
        print(dry_run.render(plan))
    print("\n(dry run: nothing was started)")
    return 0


def _value(cfg: dict, key: str):
    section, _, name = key.partition(".")
    return json.dumps(cfg[section].get(name))


def _cmd_study(args: argparse.Namespace) -> int:
    from prl.studies.config import load_study

    study = load_study(args.config, study_id=args.study)
    if args.dry_run:
        return _dry_run(study, args)
    check_store(study.settings.store, write=True)
    Path(study.settings.out_dir).mkdir(parents=True, exist_ok=True)
    from flows.study import study_flow

    flow = study_flow(args.task_runner, study.settings.concurrency, args.ray_address)
    return run_flow(Path(study.settings.out_dir) / "study.log",
                    lambda: flow(args.config, study_id=args.study, task_runner=args.task_runner,
                                 progress=show_progress(args)), args=args,
                    next_hint=lambda _: f"prl report --study {study.id} --db {study.settings.store}   (dashboard: "
                    f"prl dashboard --db {study.settings.store}, page Study)")


def register(sub) -> None:
    """Add ``study`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "study",
        help="a grid of training settings × seeds, each trained and evaluated, and the report across seeds",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run a study (the Prefect flow 'study'): every cell of the config's grid (estimator, eta, step
split, order, lr, ...) at every seed is a training run whose final policy is evaluated into the
study's store. The jobs run under a Prefect concurrency limit 'study-<id>' with the config's
study.concurrency slots (1 on CPU: concurrent trainers on 2 cores run slower than in turn),
tagged 'study:<id>'. A study that was killed is finished by rerunning the same command: finished
jobs are skipped, training resumes from its last checkpoint, evaluation from its stored samples.

At the end the report is written to OUT_DIR/study_report.{md,html,json} and as a Prefect
artifact: per cell average@n and pass@k (k = 1..n) with 95% CIs across seeds and across
problems, each cell against the baseline seed by seed, reward against KL over training, the
eta sweep, and the keys in which the cells' configs differ. `prl report --study ID` rewrites it.

A config that contradicts itself (a PRL key on a GRPO cell, a grid with no cells, repeated
seeds, two identical cells, an unknown baseline) is refused before anything runs.

examples:
  prl study --config configs/study/embedded.yaml
  prl study --config configs/study/paper_table5.yaml --dry-run --gpus-per-node 4
  prl report --study embedded --db runs/study/embedded/store.duckdb
""")
    add_config_arguments(p, StudyOptions)
    add_config_arguments(p, OutputOptions)
    p.set_defaults(func=_cmd_study)
