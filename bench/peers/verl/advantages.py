"""verl's own advantage functions on the tensors bench/peers.py wrote; run in verl's environment
(bench/.envs/verl), never in the project's:

    bench/.envs/verl/bin/python bench/peers/verl/advantages.py IN.pt OUT.pt [--repeats N]

IN.pt holds, per case, ``scores`` (B,), ``index`` (B,) group ids and ``mask`` (B, L) bool. For each case
this calls ``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage`` (verl's reference GRPO, a
Python loop over the batch) and ``compute_grpo_vectorized_outcome_advantage`` (its vectorised twin)
with the token-level rewards verl builds (the score on the last response token), times each (median
of ``repeats`` after 2 warm-ups), and writes their advantages and times to OUT.pt with verl's version.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import verl
from verl.trainer.ppo import core_algos


def token_level(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's reward tensor: the sequence score on each response's last valid token, 0 elsewhere."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    last = mask.long().sum(dim=1) - 1
    rows = torch.nonzero(last >= 0).flatten()
    out[rows, last[rows]] = scores[rows].float()
    return out


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    for _ in range(2):
        out = fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(int(torch.get_num_threads()))
    cases = torch.load(args.inp)
    result = {"verl": verl.__version__, "torch": torch.__version__, "numpy": np.__version__, "cases": {}}
    for name, c in cases.items():
        mask = c["mask"].bool()
        rewards = token_level(c["scores"], mask)
        index = np.array([f"p{int(i)}" for i in c["index"]], dtype=object)  # verl groups by the uid strings
        response_mask = mask.float()
        fns = {
            "grpo_loop": lambda: core_algos.compute_grpo_outcome_advantage(rewards, response_mask, index)[0],
            "grpo_vectorized": lambda: core_algos.compute_grpo_vectorized_outcome_advantage(
                rewards, response_mask, index)[0],
            "dr_grpo_loop": lambda: core_algos.compute_grpo_outcome_advantage(
                rewards, response_mask, index, norm_adv_by_std_in_grpo=False)[0],
        }
        out = {}
        for key, fn in fns.items():
            ms, adv = timed(fn, args.repeats if mask.numel() > 1e5 else 3 * args.repeats)
            out[key] = {"ms": ms, "advantages": adv.clone()}
        result["cases"][name] = out
    torch.save(result, args.out)


if __name__ == "__main__":
    main()
