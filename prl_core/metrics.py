"""Evaluation metrics over per-sample correctness: pure functions, no I/O (DESIGN §3).

Shapes: P problems × n samples; ``correct`` is a bool (P, n) tensor (or the per-problem count
of correct samples ``c`` (P,) with n). Answers for maj@k are integer ids (P, n) of each
sample's extracted answer (equal ids = equal answers; -1 = no answer).
"""

from __future__ import annotations

import math

import torch


def pass_at_k(c: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """Unbiased pass@k per problem: 1 − C(n−c, k) / C(n, k), (P,) float64.

    ``c`` (P,) integer counts of correct samples out of ``n``; requires 1 ≤ k ≤ n.
    """
    if not 1 <= k <= n:
        raise ValueError(f"k: must be in [1, n={n}], got {k}")
    c = torch.as_tensor(c, dtype=torch.float64)
    if bool(((c < 0) | (c > n)).any()):
        raise ValueError(f"c: counts must be in [0, n={n}]")
    # C(n−c, k)/C(n, k) = Π_{i=0}^{k−1} (n−c−i)/(n−i); zero as soon as n−c < k
    i = torch.arange(k, dtype=torch.float64)
    ratio = ((n - c).unsqueeze(1) - i).clamp_min(0) / (n - i)
    return 1.0 - ratio.prod(dim=1)


def average_at_k(correct: torch.Tensor) -> torch.Tensor:
    """average@n per problem: mean correctness of its samples, (P, n) bool → (P,) float64."""
    return correct.to(torch.float64).mean(dim=1)


def maj_at_k(answer_ids: torch.Tensor, correct: torch.Tensor, k: int) -> torch.Tensor:
    """maj@k per problem over the first k samples: 1 if the most frequent answer is correct.

    answer_ids (P, n) long (-1 = no answer, never a majority); correct (P, n) bool. Ties go to
    the answer that appears first. (P,) float64.
    """
    P, n = answer_ids.shape
    if not 1 <= k <= n:
        raise ValueError(f"k: must be in [1, n={n}], got {k}")
    out = torch.zeros(P, dtype=torch.float64)
    ids, ok = answer_ids[:, :k].tolist(), correct[:, :k].tolist()
    for p in range(P):
        counts: dict[int, int] = {}
        first: dict[int, int] = {}
        for j, a in enumerate(ids[p]):
            if a < 0:
                continue
            counts[a] = counts.get(a, 0) + 1
            first.setdefault(a, j)
        if counts:
            best = max(counts, key=lambda a: (counts[a], -first[a]))
            out[p] = float(ok[p][first[best]])
    return out


def micro_macro(scores: dict[str, torch.Tensor]) -> dict[str, float]:
    """Aggregates of per-problem scores by data set: micro = size-weighted (the paper's "5 Avg"),
    macro = mean of data-set means (what the authors' scripts print)."""
    means = {d: float(s.mean()) for d, s in scores.items() if s.numel()}
    total = sum(s.numel() for s in scores.values())
    micro = sum(float(s.sum()) for s in scores.values()) / total if total else math.nan
    macro = sum(means.values()) / len(means) if means else math.nan
    return {"micro": micro, "macro": macro}


def bootstrap_ci(values: torch.Tensor, *, iters: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-problem values (P,), resampling problems."""
    v = values.to(torch.float64)
    if v.numel() == 0:
        return (math.nan, math.nan)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, v.numel(), (iters, v.numel()), generator=gen)
    means = v[idx].mean(dim=1)
    lo, hi = torch.quantile(means, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)).tolist()
    return (lo, hi)


def paired_bootstrap_diff(a: torch.Tensor, b: torch.Tensor, *, iters: int = 2000, alpha: float = 0.05,
                          seed: int = 0) -> dict[str, float]:
    """Mean difference b − a of paired per-problem values (P,) with a percentile bootstrap CI."""
    if a.shape != b.shape:
        raise ValueError(f"b: expected shape {tuple(a.shape)} (as a), got {tuple(b.shape)}")
    d = b.to(torch.float64) - a.to(torch.float64)
    lo, hi = bootstrap_ci(d, iters=iters, alpha=alpha, seed=seed)
    return {"diff": float(d.mean()) if d.numel() else math.nan, "lo": lo, "hi": hi}


def mcnemar(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Exact McNemar test on paired binary outcomes (P,) bool: gained (b only), lost (a only),
    two-sided p-value from the binomial distribution of the discordant pairs."""
    a, b = a.bool(), b.bool()
    gained, lost = int((b & ~a).sum()), int((a & ~b).sum())
    m = gained + lost
    if m == 0:
        return {"gained": 0, "lost": 0, "p_value": 1.0}
    tail = sum(math.comb(m, i) for i in range(0, min(gained, lost) + 1)) / 2**m
    return {"gained": gained, "lost": lost, "p_value": min(1.0, 2 * tail)}


def aggregate_bootstrap_ci(scores: dict[str, torch.Tensor], *, how: str = "micro", iters: int = 2000,
                           alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the micro or macro aggregate of per-problem scores by data set.

    Problems are resampled within each data set (stratified), so every replicate keeps the data
    sets' sizes; the aggregate is recomputed per replicate as :func:`micro_macro` does.
    """
    if how not in ("micro", "macro"):
        raise ValueError(f"how: expected 'micro' or 'macro', got {how!r}")
    parts = [s.to(torch.float64) for s in scores.values() if s.numel()]
    if not parts:
        return (math.nan, math.nan)
    gen = torch.Generator().manual_seed(seed)
    sums = torch.zeros(iters, dtype=torch.float64)
    means = torch.zeros(iters, dtype=torch.float64)
    for v in parts:
        idx = torch.randint(0, v.numel(), (iters, v.numel()), generator=gen)
        rep = v[idx]
        sums += rep.sum(dim=1)
        means += rep.mean(dim=1)
    total = sum(v.numel() for v in parts)
    agg = sums / total if how == "micro" else means / len(parts)
    lo, hi = torch.quantile(agg, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)).tolist()
    return (lo, hi)
