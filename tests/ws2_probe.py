"""Launcher target for the several-rank tests (tests/test_colocate.py): ``python -m prl.training.train``'s
command line, unchanged, with each rank recording what it holds after every policy update and where its
rollout engine runs.

Per rank, ``<out_dir>/ranks/rank<r>.json`` lists one entry per update: a SHA-256 of every policy
parameter before and after it (gathered whole under ZeRO-3), and a digest of the rollouts the rank trained
on. ``<out_dir>/ranks/engine<r>.json``: the rank's process-group rank and LOCAL_RANK, where vLLM's own worker
says it runs (its rank, local rank — the device index on GPUs — device and executor), and the engine's
memory events in order (generate, sleep, wake_up, weight loads, each with what the engine reports asleep
after it). The trainer itself writes only rank 0's weights, so this wrapper (test code) reads each rank's
copy. Run as ``deepspeed --num_gpus 2 tests/ws2_probe.py --config CONFIG``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from prl.training import train


def param_digests(named) -> dict[str, str]:
    """name -> SHA-256 of the parameter's float32 bytes."""
    return {name: hashlib.sha256(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()
            for name, t in named}


def _rollout_digest(r) -> str:
    h = hashlib.sha256()
    for t in (r.input_ids, r.response_ids, r.mask):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    h.update(json.dumps(r.prompt_index).encode())
    return h.hexdigest()


_update = train.Trainer.update
_close = train.Trainer.close


def full_parameters(module, zero_stage: int):
    """Every parameter gathered whole inside the block under ZeRO-3 (stages 0-2 keep them whole): the whole model
    at once on every rank, which only this probe wants (exports gather module by module:
    prl.training.weight_sync.policy_state_dict)."""
    import contextlib

    if zero_stage != 3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None)


def _digests(self) -> dict[str, str]:
    with full_parameters(self.engine.module, self.train_cfg.zero_stage):
        return param_digests(self.engine.module.named_parameters())


def _recording_update(self, r, lp, rho):
    before = _digests(self)
    out = _update(self, r, lp, rho)
    entry = {"step": self.step_no + 1, "rank": self.rank, "world": self.world, "rollouts": _rollout_digest(r),
             "before": before, "after": _digests(self)}
    path = Path(self.train_cfg.out_dir) / "ranks" / f"rank{self.rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(done + [entry]))
    return out


def _recording_close(self):
    engine = self.rollout_engine
    if engine is not None:
        record = {"rank": self.rank, "local_rank": int(os.environ["LOCAL_RANK"]), "events": list(engine.events),
                  "placement": engine.worker_placement() if hasattr(engine, "worker_placement") else None,
                  "info": {k: str(v) for k, v in engine.info().items()}}
        path = Path(self.train_cfg.out_dir) / "ranks" / f"engine{self.rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    _close(self)


train.Trainer.update = _recording_update
train.Trainer.close = _recording_close

if __name__ == "__main__":
    sys.exit(train.main())
