"""The ``train`` flow: PRL (or GRPO, Dr.GRPO, RAFT) training on DeepSpeed with every step in the store.

The loop is :class:`prl.training.train.Trainer`; this flow runs each phase of a step (rollout, verify,
log-probs, update, checkpoint) as a Prefect task and each periodic evaluation as the
``evaluate`` subflow, so the Prefect UI shows where time goes. Phases are not cached or
retried by Prefect: they change the model; resumption is DeepSpeed's checkpoint (``resume``).

Single process. Several processes: ``deepspeed --num_gpus N --module prl.training.train --config FILE``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.logs import log as _log

from prl.training.train import Trainer
from prl.training.config import RunConfig




_TASKS: dict[str, Any] = {}


def _as_task(name: str, fn, *args):
    if name not in _TASKS:
        _TASKS[name] = task(lambda f, *a: f(*a), name=name, cache_policy=NO_CACHE)
    return _TASKS[name](fn, *args)


@flow(name="train", log_prints=False)
def train(cfg: RunConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train for ``cfg.train.steps`` steps (continuing from the last checkpoint with ``resume``)."""
    from flows.evaluate import evaluate_with_engine

    trainer = Trainer(cfg, log=_log, progress=progress)
    trainer.phase_runner = _as_task
    return trainer.run(resume=resume, evaluate_fn=lambda c, engine: evaluate_with_engine(c, engine))
