"""Launcher target for the world-size-2 test (tests/test_train.py): ``python -m prl.training.train``'s
command line, unchanged, with each rank recording what it holds after every policy update.

Per rank, ``<out_dir>/ranks/rank<r>.json`` lists one entry per update: a SHA-256 of every policy
parameter before and after it, and a digest of the rollouts the rank trained on. The ranks must
train on different rollouts and hold identical parameters after every update (gradients
all-reduced); the trainer itself writes only rank 0's weights, so this wrapper (test code) reads
each rank's copy. Run as ``deepspeed --num_gpus 2 tests/ws2_probe.py --config CONFIG``.
"""

from __future__ import annotations

import hashlib
import json
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


def _recording_update(self, r, lp, rho):
    before = param_digests(self.engine.module.named_parameters())
    out = _update(self, r, lp, rho)
    entry = {"step": self.step_no + 1, "rank": self.rank, "world": self.world, "rollouts": _rollout_digest(r),
             "before": before, "after": param_digests(self.engine.module.named_parameters())}
    path = Path(self.t.out_dir) / "ranks" / f"rank{self.rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(done + [entry]))
    return out


train.Trainer.update = _recording_update

if __name__ == "__main__":
    sys.exit(train.main())
