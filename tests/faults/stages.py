"""The stages a kill can hit, two ways: *derived* from what a killed run left in the store and the files, and
*aimed*, from the fault point and the run's schedule alone. The kill chains assert the two agree.

Training (``train_state`` → ``train_stage``; ``aimed_train_stage``): steps stored S (contiguous, each with every
metric of the reference's step), checkpoint tags on disk, the tag ``latest`` names L (the one that loads), the
export of the latest checkpoint, and the training's periodic evaluation runs (status, samples, shard files).
Evaluation (``eval_stage``): problems stored whole, chunks stored, the run's status. Warm start
(``warm_stage``): the base model's and the warm start's directories and their marker files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chain import Aim

from prl.store.db import Store
from prl.training.config import WARM_START_BASE, WARM_START_MARKERS, WARM_START_MODEL
from prl.training.exports import EXPORT_RECORD, eval_run_id, export_dir

# ─── training ─────────────────────────────────────────────────────────────────────────────────────

TRAIN_POINTS = ("train/step_start", "train/update_done", "train/checkpoint_written", "train/checkpoint_saved",
                "train/store_write")
EVAL_POINTS = ("eval/generate", "eval/shard_written", "store/insert_samples")
KINDS = {
    "train/step_start": "a step started, before its rollouts",
    "train/update_done": "between an update and its checkpoint",
    "train/checkpoint_written": "checkpoint files written, `latest` not yet moved",
    "train/checkpoint_saved": "checkpoint committed, its export not yet written",
    "train/store_write": "inside the step's store transaction",
    "eval/generate": "in-loop evaluation: generating",
    "eval/shard_written": "in-loop evaluation: shard written, not stored",
    "store/insert_samples": "in-loop evaluation: inside its store transaction",
}


@dataclass(frozen=True)
class Schedule:
    """A training run's schedule: what the aimed stage follows from."""

    run_id: str
    steps: int
    checkpoint_every: int
    eval_every: int = 0
    evaluates: bool = False
    """Whether the run evaluates (periodically when ``eval_every``, and after its last step)."""
    exports: bool = True
    """``export_checkpoints``: each checkpoint also written as a Hugging Face export."""

    def is_checkpoint(self, step: int) -> bool:
        return step % self.checkpoint_every == 0 or step == self.steps

    def checkpoint_before(self, step: int) -> int:
        """The newest checkpoint step before ``step`` (0: none)."""
        return max((s for s in range(1, step) if self.is_checkpoint(s)), default=0)

    def eval_steps(self) -> list[int]:
        if not self.evaluates:
            return []
        periodic = list(range(self.eval_every, self.steps, self.eval_every)) if self.eval_every else []
        return periodic + [self.steps]


def train_state(db: Path, out_dir: Path, sched: Schedule, ref_steps: dict[int, set[str]]) -> dict[str, Any]:
    """What a killed training left: asserts whole steps only (contiguous, every reference metric of each step),
    and that the checkpoint ``latest`` names loads; returns the observables the stage is derived from. A step's
    evaluation metrics are all there or none (a kill between the step's write and its evaluation's)."""
    import torch

    from prl.training.train import Trainer

    store = Store(db, create=False, lock_timeout_s=30) if db.exists() else None
    steps: dict[int, set[str]] = {}
    if store is not None:
        for _run, step, name, _v in store.rows("train_metrics_for_runs", run_ids=[sched.run_id]):
            steps.setdefault(step, set()).add(name)
    assert sorted(steps) == list(range(1, len(steps) + 1)), f"{sched.run_id}: steps not contiguous: {sorted(steps)}"
    def own(names: set[str]) -> set[str]:  # a step's own metrics, without its evaluation's (stored after them)
        return {n for n in names if not n.startswith(Trainer.EVALUATION_METRICS)}
    partial = [s for s, names in steps.items()
               if own(names) != own(ref_steps[s]) or names - own(names) not in (set(), ref_steps[s] - own(ref_steps[s]))]
    assert not partial, f"{sched.run_id}: steps {partial} stored partially (or with other metric names)"
    ckpt = out_dir / "checkpoints"
    tags = sorted(int(p.name.split("_")[1]) for p in ckpt.glob("step_*") if p.is_dir())
    latest_file = ckpt / "latest"
    latest = int(latest_file.read_text().strip().split("_")[1]) if latest_file.is_file() else 0
    if latest:  # the checkpoint `latest` names is whole and loads
        states = torch.load(ckpt / f"step_{latest:06d}" / "mp_rank_00_model_states.pt", map_location="cpu",
                            weights_only=False)
        assert states["module"] and states["step"] == latest, f"{ckpt}: latest step_{latest:06d} is not step {latest}"
    evals = {}
    for step in sched.eval_steps():
        run_id = eval_run_id(sched.run_id, step)
        run = store.records("get_run", run_id=run_id) if store is not None else []
        if not run:
            continue
        counts = store.rows("stored_counts_for_run", run_id=run_id)
        shard_dir = db.parent / "shards" / run_id
        evals[step] = {"status": run[0]["status"], "samples": sum(c for *_, c in counts),
                       "shard_files": len(list(shard_dir.glob("*.parquet"))) if shard_dir.is_dir() else 0}
    return {"steps_stored": len(steps), "checkpoints": tags, "latest": latest,
            "latest_exported": bool(latest) and (export_dir(out_dir, latest) / EXPORT_RECORD).is_file(),
            "evaluations": evals}


def train_stage(state: dict[str, Any], sched: Schedule) -> str:
    """The stage the store and files show (see the module doc)."""
    S, L, tags = state["steps_stored"], state["latest"], state["checkpoints"]
    running = [s for s, e in state["evaluations"].items() if e["status"] != "finished"]
    if running:
        e = state["evaluations"][running[0]]
        what = "shard written, not stored" if e["shard_files"] and not e["samples"] else (
            "registered, no shard written" if not e["samples"] else f"{e['samples']} samples stored, not finished")
        return f"evaluation of step {running[0]}: {what}"
    newer = [t for t in tags if t > L]
    if newer:
        return f"checkpoint {newer[-1]} written, latest still at {L}"
    if L > S:
        return f"checkpoint {L} committed (export {'written' if state['latest_exported'] else 'missing'}), " \
               f"steps {S + 1}..{L} not stored"
    return _in_flight(S, L, sched)


def _in_flight(stored: int, latest: int, sched: Schedule) -> str:
    nxt = stored + 1
    where = f"before the first checkpoint: {stored} step(s) stored" if not latest else (
        f"after checkpoint {latest}: {stored - latest} step(s) stored past it")
    return (f"{where}, step {nxt} in flight"
            + (" (a checkpoint step, not checkpointed)" if sched.is_checkpoint(nxt) else ""))


def aimed_train_stage(point: str, step: int, sched: Schedule) -> str:
    """The stage a kill at ``point`` of step ``step`` must leave (from the schedule only)."""
    if point == "eval/generate":  # generating or verifying: nothing of it written yet
        return f"evaluation of step {step}: registered, no shard written"
    if point in ("eval/shard_written", "store/insert_samples"):
        return f"evaluation of step {step}: shard written, not stored"
    if point == "train/checkpoint_written":
        return f"checkpoint {step} written, latest still at {sched.checkpoint_before(step)}"
    if point == "train/checkpoint_saved":
        return f"checkpoint {step} committed (export missing), steps {step}..{step} not stored"
    if point == "train/store_write" and sched.is_checkpoint(step):
        return (f"checkpoint {step} committed (export {'written' if sched.exports else 'missing'}), "
                f"steps {step}..{step} not stored")
    return _in_flight(step - 1, sched.checkpoint_before(step), sched)


def train_aim(point: str, step: int, sched: Schedule, delay: float = 0.0, *, stage_prefix: str = "") -> Aim:
    """The fault spec of a kill at ``point`` of step ``step`` (an evaluation point: that step's evaluation)."""
    key = eval_run_id(sched.run_id, step) if point in EVAL_POINTS else f"{sched.run_id}/{step}"
    kind = KINDS[point] if point != "train/update_done" or sched.is_checkpoint(step) else (
        "between an update and its store write (a step without a checkpoint)")
    return Aim(f"{point}@{key}" + (f"+{delay}" if delay else ""), stage_prefix + kind,
               stage_prefix + aimed_train_stage(point, step, sched))


def train_timeline(sched: Schedule) -> list[tuple[int, str]]:
    """Every (step, point) a run reaches once, in the order it reaches them."""
    out = []
    evals = set(sched.eval_steps())
    for step in range(1, sched.steps + 1):
        out += [(step, "train/step_start"), (step, "train/update_done")]
        if sched.is_checkpoint(step):
            out.append((step, "train/checkpoint_written"))
            if sched.exports:
                out.append((step, "train/checkpoint_saved"))
        out.append((step, "train/store_write"))
        if step in evals:
            out += [(step, p) for p in EVAL_POINTS]
    return out


def random_train_aims(sched: Schedule, rng: random.Random, k: int, *, stage_prefix: str = "",
                      first_step: int = 1) -> list[Aim]:
    """``k`` kills at distinct seeded random points of the timeline, in the order a run reaches them (each is
    reached by the resumed run: it comes later than the kill before it): as many distinct kinds of point as
    ``k`` allows, drawn at random, each at a random step where it occurs. A generation kill comes at the start of
    the evaluation's generation: an in-loop evaluation (6 problems × 2 samples) can generate, verify and write its
    shard within 0.1 s, which the stage then shows (measured once in the long chain)."""
    line = [(s, p) for s, p in train_timeline(sched) if s >= first_step]
    by_kind: dict[str, list[int]] = {}
    for i, (_s, p) in enumerate(line):
        by_kind.setdefault(p, []).append(i)
    picks: set[int] = set()
    for kind in rng.sample(sorted(by_kind), min(k, len(by_kind))):
        picks.add(rng.choice(by_kind[kind]))
    while len(picks) < min(k, len(line)):
        picks.add(rng.randrange(len(line)))
    picks = sorted(picks)
    return [train_aim(p, s, sched, stage_prefix=stage_prefix)
            for s, p in (line[i] for i in picks)]


# ─── evaluation ────────────────────────────────────────────────────────────────────────────────────

def eval_stage(db: Path, run_id: str, n: int, chunk_problems: int) -> dict[str, Any]:
    """What a killed evaluation left: asserts per problem 0 or n samples; the stage names the chunks stored."""
    if not db.exists():
        return {"stage": "before the store", "samples": 0}
    store = Store(db, create=False, lock_timeout_s=30)
    run = store.records("get_run", run_id=run_id)
    counts = store.rows("stored_counts_for_run", run_id=run_id)
    assert {c for *_, c in counts} <= {n}, f"{run_id}: a problem stored partially"
    problems = len(counts)
    if not run:
        return {"stage": "run not registered", "samples": 0}
    chunks, rest = divmod(problems, chunk_problems)
    stage = f"{run[0]['status']}, {chunks} chunk(s) stored" + (f" and {rest} problem(s)" if rest else "")
    return {"stage": stage, "samples": problems * n}


def aimed_eval_stage(chunks_stored: int, status: str = "running") -> str:
    return f"{status}, {chunks_stored} chunk(s) stored"


# ─── the warm start ───────────────────────────────────────────────────────────────────────────────

def warm_stage(models: Path) -> str:
    """The warm start's stage from its directories: which of the base model and the warm start exist, and whether
    each is complete (its marker file, written last) or partial."""
    parts = []
    for stage in (WARM_START_BASE, WARM_START_MODEL):
        d = models / stage
        marker = (d / WARM_START_MARKERS[stage]).is_file()
        weights = (d / "model.safetensors").is_file()
        parts.append(f"{stage} " + ("complete" if marker else "weights without marker" if weights else
                                    "started" if d.is_dir() else "absent"))
    return "warm start: " + ", ".join(parts)
