"""Benchmark: PRL advantages at the paper's batch shape (DESIGN §6).

Times ``prl_advantages`` at B = 640 (128 prompts × 5), L = 3072, token level and fixed:256,
against (a) a per-sample Python-loop implementation of the same formula (the shape of the
authors' code: one sample at a time, S_t = k_t + S_{t+1} token by token, then each step's
value copied left), (b) a stronger per-sample loop that vectorises within each sample with
torch, and (c) one ``torch.cumsum`` over a tensor of the same shape — all in the same run,
reported as ratios. Targets: ≥ 20× the loop,
within 3× of the cumsum. Also checks that the loop and the vectorised code agree.

    python bench/advantages.py [--repeats 15] [--quick]

Writes bench/results/advantages.json and the advantages section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, median_ms, paired_ms, render_results_md, write_json  # noqa: E402

from prl_core import prl_advantages, step_boundaries  # noqa: E402


def loop_prl(rewards, group_ids, logp_old, logp_ref, mask, eta, every=None):
    """Per-sample loop: group statistics per prompt, then each sample's suffix sums and segments."""
    B, T = mask.shape
    out = torch.zeros_like(logp_old)
    adv = torch.empty(B, dtype=logp_old.dtype)
    for g in group_ids.unique().tolist():
        idx = (group_ids == g).nonzero().squeeze(1)
        r = rewards[idx]
        if len(idx) == 1:
            adv[idx] = r
        elif bool((r == r[0]).all()):
            adv[idx] = 0.0
        else:
            adv[idx] = (r - r.mean()) / (r.std() + 1e-6)
    for i in range(B):
        cols = mask[i].nonzero().squeeze(1)
        if len(cols) == 0:
            continue
        k = logp_old[i, cols] - logp_ref[i, cols]
        s = k.flip(0).cumsum(0).flip(0)
        rho = adv[i] - s / eta
        if every is None:
            out[i, cols] = rho
            continue
        n = len(cols)
        for start in range(0, n, every):  # one step at a time: every token gets its step's last value
            end = min(start + every, n)
            out[i, cols[start:end]] = rho[end - 1]
    return out


def python_loop_prl(rewards, group_ids, logp_old, logp_ref, mask, eta, every=None):
    """Per-sample, per-token Python loop, as the authors' code is written: S_t = k_t + S_{t+1}
    from the end of each response, then each step's last value copied left over the step."""
    B, T = mask.shape
    adv = loop_group_adv(rewards.tolist(), group_ids.tolist())
    old_l, ref_l, mask_l = logp_old.tolist(), logp_ref.tolist(), mask.tolist()
    out = [[0.0] * T for _ in range(B)]
    for i in range(B):
        cols = [t for t in range(T) if mask_l[i][t]]
        rho = [0.0] * len(cols)
        s = 0.0
        for j in range(len(cols) - 1, -1, -1):
            t = cols[j]
            s += old_l[i][t] - ref_l[i][t]
            rho[j] = adv[i] - s / eta
        n = len(cols)
        for j, t in enumerate(cols):
            if every is None:
                out[i][t] = rho[j]
            else:
                end = min((j // every + 1) * every, n)
                out[i][t] = rho[end - 1]
    return torch.tensor(out, dtype=logp_old.dtype)


def loop_group_adv(rewards, groups):
    by_group: dict[int, list[float]] = {}
    for r, g in zip(rewards, groups):
        by_group.setdefault(g, []).append(r)
    out = []
    for r, g in zip(rewards, groups):
        members = by_group[g]
        n = len(members)
        if n == 1:
            out.append(r)
        elif max(members) == min(members):
            out.append(0.0)
        else:
            mean = sum(members) / n
            std = math.sqrt(sum((m - mean) ** 2 for m in members) / (n - 1))
            out.append((r - mean) / (std + 1e-6))
    return out


def make_batch(B: int, T: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=gen)
    mask = torch.arange(T) < lengths[:, None]
    return dict(
        rewards=torch.randint(0, 2, (B,), generator=gen).float(),
        group_ids=torch.arange(B) // 5,
        logp_old=-torch.rand(B, T, generator=gen) * 2,
        logp_ref=-torch.rand(B, T, generator=gen) * 2,
        mask=mask,
    )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=31, help="timed runs per measurement (median reported)")
    ap.add_argument("--loop-repeats", type=int, default=3, help="timed runs of the slow loop")
    ap.add_argument("--quick", action="store_true", help="B=64, L=512: a smoke run, not the target shape")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    B, T = (64, 512) if args.quick else (640, 3072)
    eta = 200.0
    b = make_batch(B, T, args.seed)
    bnd = step_boundaries(b["mask"], "fixed:256")

    cumsum_ms = median_ms(lambda: torch.cumsum(b["logp_old"], -1), args.repeats)
    results = {"shape": {"B": B, "T": T, "eta": eta}, "baseline_cumsum_ms": cumsum_ms, "cases": {}, "machine": machine()}
    for name, boundaries, every in (("token", None, None), ("fixed:256", bnd, 256)):
        fast = prl_advantages(**b, eta=eta, boundaries=boundaries)
        slow = loop_prl(**b, eta=eta, every=every)
        max_err = float((fast - slow).abs().max())
        fast_ms, base_ms, cumsum_ratio = paired_ms(
            lambda: prl_advantages(**b, eta=eta, boundaries=boundaries),
            lambda: torch.cumsum(b["logp_old"], -1), args.repeats,
        )
        torch_loop_ms = median_ms(lambda: loop_prl(**b, eta=eta, every=every), args.repeats, warmup=1)
        py = python_loop_prl(**b, eta=eta, every=every)
        max_err = max(max_err, float((fast - py).abs().max()))
        loop_ms = median_ms(lambda: python_loop_prl(**b, eta=eta, every=every), args.loop_repeats, warmup=0)
        results["cases"][name] = {
            "prl_advantages_ms": fast_ms,
            "loop_ms": loop_ms,
            "speedup_vs_loop": loop_ms / fast_ms,
            "per_sample_torch_loop_ms": torch_loop_ms,
            "speedup_vs_per_sample_torch_loop": torch_loop_ms / fast_ms,
            "cumsum_ms_paired": base_ms,
            "ratio_to_cumsum": cumsum_ratio,
            "max_abs_diff_vs_loop": max_err,
            "meets_loop_target_20x": loop_ms / fast_ms >= 20,
            "meets_cumsum_target_3x": cumsum_ratio <= 3,
        }
    results["step_boundaries_fixed256_ms"] = median_ms(lambda: step_boundaries(b["mask"], "fixed:256"), args.repeats)
    path = write_json("advantages_quick" if args.quick else "advantages", results)

    print(f"prl_advantages at B={B}, L={T} (torch {results['machine']['torch']}, {results['machine']['torch_threads']} threads)")
    print(f"  one torch.cumsum over (B, L): {cumsum_ms:.2f} ms")
    for name, r in results["cases"].items():
        print(f"  {name:<10} {r['prl_advantages_ms']:7.2f} ms | Python loop {r['loop_ms']:8.0f} ms = {r['speedup_vs_loop']:6.0f}x faster "
              f"[target >= 20x: {'met' if r['meets_loop_target_20x'] else 'MISSED'}] | {r['ratio_to_cumsum']:.2f}x the cumsum "
              f"[target <= 3x: {'met' if r['meets_cumsum_target_3x'] else 'MISSED'}] | per-sample torch loop "
              f"{r['per_sample_torch_loop_ms']:.1f} ms = {r['speedup_vs_per_sample_torch_loop']:.1f}x | max |diff| {r['max_abs_diff_vs_loop']:.1e}")
    print(f"  step_boundaries(fixed:256): {results['step_boundaries_fixed256_ms']:.2f} ms (once per batch, not in the timings above)")
    if not args.quick:
        print(f"wrote {path} and {render_results_md()}")
    else:
        print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()
