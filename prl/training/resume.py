"""Save and resume: DeepSpeed checkpoints of a training run (model, optimizer, scheduler, RNG, step).

``OUT/checkpoints/step_N`` holds one checkpoint (every rank's ZeRO partitions), ``OUT/checkpoints/latest``
names the newest complete one. A step is finished once its checkpoint exists; the store rows of the steps
since the previous checkpoint travel inside it (``client_state["pending"]``) so a run that died between the
checkpoint and the store write re-writes them on resume. (Hugging Face exports of the policy, which vLLM and
evaluations load, are :mod:`prl.training.exports`.)
"""

from __future__ import annotations

from prl_core.errors import UserError
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from prl_core.config import ConfigError

from prl.fault_points import fault_point
from prl.store.db import Store
from prl.training.config import TrainConfig

CHECKPOINT_DIR = "checkpoints"


class CheckpointError(UserError, RuntimeError):
    """A checkpoint could not be written; the message names it and how to continue."""


def tag_of(step: int) -> str:
    return f"step_{step:06d}"


def save(engine, out: Path, step: int, client_state: dict[str, Any], *, keep: int, rank: int,
         fault_key: str | None = None) -> None:
    """Write the checkpoint of ``step`` (every rank calls it; DeepSpeed writes each rank's partitions), then point
    ``latest`` at it, and keep the ``keep`` newest. A failed write (full disk, quota, permissions) leaves the
    previous one the latest. ``latest`` is replaced atomically (a temporary file renamed over it) once every
    rank's files are written, so a crash leaves it naming a complete checkpoint: the old one or the new one
    (DeepSpeed's own ``latest`` is rewritten in place). ``fault_key``: the key of the fault point between the
    two (:mod:`prl.fault_points`)."""
    root = out / CHECKPOINT_DIR
    tag = tag_of(step)
    try:
        engine.save_checkpoint(str(root), tag=tag, client_state=client_state, save_latest=False)  # ends in a barrier
        fault_point("train/checkpoint_written", fault_key)
        if rank == 0:
            _write_latest(root, tag)
    except Exception as e:  # full disk, quota, permissions: the previous checkpoint stays the latest
        shutil.rmtree(root / tag, ignore_errors=True)
        prev = root / "latest"
        prev_tag = prev.read_text().strip() if prev.is_file() else None
        raise CheckpointError(
            f"{root / tag}: could not write the checkpoint of step {step} "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r}); "
            + (f"the previous checkpoint {prev_tag} is intact" if prev_tag else "no earlier checkpoint exists")
            + " — free space and rerun with --resume") from e
    if rank == 0:
        tags = sorted(p for p in root.glob("step_*") if p.is_dir())
        for old in tags[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    torch.distributed.barrier()


def _write_latest(root: Path, tag: str) -> None:
    tmp = root / f".latest.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            fh.write(tag)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, root / "latest")
    finally:
        tmp.unlink(missing_ok=True)


def load(engine, out: Path, log: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """Load the newest checkpoint that reads; None when there is none (killed before its first one).

    Tries the tag ``latest`` names, then older ones: a checkpoint that cannot be read (a file truncated by
    a crash or a full disk) is skipped with a warning naming it, and the run resumes from the newest one that
    loads; the steps after it are redone. None of them loading is a ConfigError saying what to do.
    """
    root = out / CHECKPOINT_DIR
    tags = sorted((p.name for p in root.glob("step_*") if p.is_dir()), reverse=True)  # newest first
    latest = (root / "latest").read_text().strip() if (root / "latest").is_file() else ""
    if not tags:
        return None
    # `latest` is written after a save completes: tags newer than it may be partial, but are tried when
    # `latest` itself is missing or damaged (a crash while writing it).
    order = ([latest] + [t for t in tags if t < latest]) if latest in tags else tags
    skipped: list[str] = []
    for tag in order:
        try:
            path, state = engine.load_checkpoint(str(root), tag=tag)
        except Exception as e:  # noqa: BLE001 - reported below, then the next older checkpoint
            path, state = None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if path is not None and isinstance(state, dict) and "step" in state:
            break
        skipped.append(f"{root / tag} ({state or 'incomplete'})")
    else:
        raise ConfigError(f"{root}: no checkpoint could be loaded: {'; '.join(skipped)}. Start over with a new "
                          "out_dir and run id, or delete this out_dir and the run's rows")
    if skipped:
        log(f"[train] WARNING: skipped unreadable checkpoint(s) {'; '.join(skipped)}; resuming from {path}")
    return Path(path), state


def check_fresh_start(t: TrainConfig) -> None:
    """Refuse to start over a run that exists (its checkpoints or its rows in the store would be mixed up)."""
    root = Path(t.out_dir) / CHECKPOINT_DIR
    if (root / "latest").exists() or any(p.is_dir() for p in root.glob("step_*")):
        raise ConfigError(f"{t.out_dir}: holds a checkpoint of an earlier run; pass --resume to continue it "
                          "or choose another out_dir")
    if Path(t.db).exists():
        if Store(t.db, create=False).rows("train_steps_for_run", run_id=t.resolved_run_id):
            raise ConfigError(f"{t.db}: run {t.resolved_run_id!r} already has training steps; pass --resume "
                              "to continue it or choose another --run")
