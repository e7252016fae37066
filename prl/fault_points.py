"""Named fault points: a precise ``kill -9`` at a chosen stage of a run, for the kill chains (tests/faults).

The code calls :func:`fault_point` at the stages where a crash hurts (between a training step's update
and its checkpoint, inside a store transaction, during a chunk's generation, …). Unset, a call costs one
comparison with ``None``. With the environment variable :data:`ENV` set when the process starts, the
matching call SIGKILLs the whole process group, as ``kill -9 -PGID`` from a terminal would: the command,
the training process it launched, vLLM's and the verifier's workers — nothing gets to clean up.

    PRL_FAULT_POINT=POINT[@KEY][:N][+DELAY]

- ``POINT``: a name of :data:`POINTS`.
- ``@KEY``: only calls with this key count (a training point's key is ``<run id>/<step>``, an evaluation
  point's the run id, the warm start's the SFT step); without it every call of the point counts. A key
  holds no ``:`` or ``+``.
- ``:N``: the N-th counted call in this process fires (default 1).
- ``+DELAY``: the kill comes DELAY seconds after that call, from a timer thread, while the code after the
  point runs (a kill *during* a generation rather than at its start).

A process without its own process group must not set it (the kill takes the group it is in): the kill
chains start each command with ``start_new_session=True``. Before the kill, one line goes to stderr naming
the point; nothing else is written, so what a kill leaves behind is what the store and the files show.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

ENV = "PRL_FAULT_POINT"

POINTS = {
    "sft/step": "the warm start's SFT loop, after the optimizer step (key: the step, 1-based)",
    "sft/saved": "the warm start's weights written, its marker (sft_report.json) not yet",
    "train/step_start": "a training step about to generate its rollouts (key: <run id>/<step>)",
    "train/update_done": "a training step's update and weight sync done, before its checkpoint and its store write",
    "train/checkpoint_written": "a checkpoint's files written, `latest` not yet pointing at it",
    "train/checkpoint_saved": "a checkpoint committed (`latest` points at it), its export not yet written",
    "train/store_write": "inside a training step's store transaction: its rows inserted, not committed",
    "eval/generate": "an evaluation chunk (or shard chunk) about to be generated (key: the eval run id)",
    "eval/shard_written": "an evaluation shard's Parquet file written, not yet stored (key: the eval run id)",
    "store/insert_samples": "inside the samples' store transaction: rows inserted, not committed (key: the run id)",
}
"""Every fault point the code calls, and where it sits (tests/faults/test_fault_points.py checks that each
name here is called somewhere and that every call names one of these)."""


@dataclass
class Spec:
    """The parsed :data:`ENV` value."""

    point: str
    key: str | None = None
    occurrence: int = 1
    delay_s: float = 0.0
    seen: int = 0

    @classmethod
    def parse(cls, text: str) -> "Spec":
        m = re.fullmatch(r"([a-z_]+/[a-z_]+)(?:@([^:+]+))?(?::(\d+))?(?:\+(\d+(?:\.\d*)?))?", text.strip())
        if m is None:
            raise ValueError(f"{ENV}={text!r}: expected POINT[@KEY][:N][+DELAY] (KEY without ':' or '+', N an "
                             "integer >= 1, DELAY seconds)")
        point, key, occurrence, delay = m.groups()
        if point not in POINTS:
            raise ValueError(f"{ENV}={text!r}: unknown fault point {point!r}; known: {', '.join(POINTS)}")
        spec = cls(point, key, int(occurrence or 1), float(delay or 0))
        if spec.occurrence < 1:
            raise ValueError(f"{ENV}={text!r}: N counts from 1")
        return spec


_SPEC: Spec | None = Spec.parse(os.environ[ENV]) if os.environ.get(ENV) else None


def fault_point(name: str, key: Any | Callable[[], Any] = None) -> None:
    """A named place where a kill can be injected (:data:`POINTS`); no-op unless :data:`ENV` names it.
    ``key``: a value (or a function returning it, called only when armed) that ``@KEY`` is matched against."""
    spec = _SPEC
    if spec is None or spec.point != name:
        return
    if spec.key is not None:
        value = key() if callable(key) else key
        if str(value) != spec.key:
            return
    spec.seen += 1
    if spec.seen != spec.occurrence:
        return
    print(f"[fault] {ENV}={os.environ.get(ENV)}: SIGKILL to process group {os.getpgrp()} at {name}"
          + (f" in {spec.delay_s} s" if spec.delay_s else ""), file=sys.stderr, flush=True)
    if spec.delay_s:
        timer = threading.Timer(spec.delay_s, _kill)
        timer.daemon = True
        timer.start()
        return
    _kill()


def _kill() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)
