"""Benchmark: PRL advantages at the paper's batch shape (docs/architecture.md §Targets).

Times ``prl_advantages`` at B = 640 (128 prompts × 5), L = 3072, token level and fixed:256
(given as the split string, the trainer's call, and as an explicit boundary mask, the general
path every split can take),
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
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, median_ms, paired_ms, render_all, write_json  # noqa: E402

from prl_core import prl_advantages, step_boundaries  # noqa: E402

CODE = ("bench/advantages.py", "prl_core/advantages.py", "prl_core/boundaries.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""


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


# glibc hands freed multi-MB blocks back to the OS, so the next call page-faults them in again;
# how often depends on what ran before. "steady" raises the thresholds so large blocks are
# reused, as in a long-running trainer with a caching allocator. Both are measured and shown.
ALLOCATORS = {
    "default": None,
    "steady": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824",
}


def measure(B: int, T: int, repeats: int, loop_repeats: int, seed: int) -> dict:
    eta = 200.0
    b = make_batch(B, T, seed)
    bnd = step_boundaries(b["mask"], "fixed:256")
    results = {"shape": {"B": B, "T": T, "eta": eta},
               "baseline_cumsum_ms": median_ms(lambda: torch.cumsum(b["logp_old"], -1), repeats), "cases": {}}
    cases = (
        ("token", None, None),
        ("fixed:256", "fixed:256", 256),  # the split string, as the trainer passes it: chunked fast path
        ("fixed:256 (boundary mask)", bnd, 256),  # an explicit bool mask: the general path (any split)
    )
    for name, boundaries, every in cases:
        fast = prl_advantages(**b, eta=eta, boundaries=boundaries)
        max_err = float((fast - loop_prl(**b, eta=eta, every=every)).abs().max())
        max_err = max(max_err, float((fast - python_loop_prl(**b, eta=eta, every=every)).abs().max()))
        fast_ms, base_ms, cumsum_ratio = paired_ms(
            lambda: prl_advantages(**b, eta=eta, boundaries=boundaries),
            lambda: torch.cumsum(b["logp_old"], -1), repeats,
        )
        torch_loop_ms = median_ms(lambda: loop_prl(**b, eta=eta, every=every), repeats, warmup=1)
        loop_ms = median_ms(lambda: python_loop_prl(**b, eta=eta, every=every), loop_repeats, warmup=0)
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
    results["step_boundaries_fixed256_ms"] = median_ms(lambda: step_boundaries(b["mask"], "fixed:256"), repeats)
    return results


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=31, help="timed runs per measurement (median reported)")
    ap.add_argument("--loop-repeats", type=int, default=3, help="timed runs of the slow Python loop")
    ap.add_argument("--quick", action="store_true", help="B=64, L=512: a smoke run, not the target shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)  # internal: measure, write JSON, exit
    args = ap.parse_args(argv)
    B, T = (64, 512) if args.quick else (640, 3072)
    if args.child:
        Path(args.child).write_text(json.dumps(measure(B, T, args.repeats, args.loop_repeats, args.seed)))
        return {}

    results = {"machine": machine_info(), "allocators": {}}
    for mode, tunables in ALLOCATORS.items():
        env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
        if tunables:
            env["GLIBC_TUNABLES"] = tunables
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [sys.executable, __file__, "--child", str(out), "--repeats", str(args.repeats),
                   "--loop-repeats", str(args.loop_repeats), "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
            subprocess.run(cmd, env=env, check=True)
            r = json.loads(out.read_text())
        r["glibc_tunables"] = tunables or "(default)"
        results["allocators"][mode] = r
        print(f"[{mode} allocator] prl_advantages at B={B}, L={T}; one torch.cumsum: {r['baseline_cumsum_ms']:.2f} ms")
        for name, c in r["cases"].items():
            print(f"  {name:<26} {c['prl_advantages_ms']:6.2f} ms | {c['speedup_vs_loop']:5.0f}x the Python loop "
                  f"[>= 20x: {'met' if c['meets_loop_target_20x'] else 'MISSED'}] | {c['ratio_to_cumsum']:.2f}x the cumsum "
                  f"[<= 3x: {'met' if c['meets_cumsum_target_3x'] else 'MISSED'}] | {c['speedup_vs_per_sample_torch_loop']:.1f}x "
                  f"the per-sample torch loop | max |diff| {c['max_abs_diff_vs_loop']:.1e}")
    path = write_json("advantages_quick" if args.quick else "advantages", results, code=CODE)
    print(f"wrote {path}" + ("" if args.quick else "; re-rendered " + ", ".join(p.name for p in render_all())))
    return results


if __name__ == "__main__":
    main()
