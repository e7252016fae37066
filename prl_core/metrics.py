"""Evaluation metrics over per-sample correctness: pure functions, no I/O
(docs/architecture.md §Metrics and aggregates).

Shapes: P problems × n samples; ``correct`` is a bool (P, n) tensor (or the per-problem count
of correct samples ``c`` (P,) with n). Answers for maj@k are each sample's extracted answer
string (None = no answer), grouped by an ``equivalent(a, b)`` predicate the caller supplies
(the verifier's mathematical equivalence; prl_core imports nothing from ``prl``).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch


def pass_at_k(c: torch.Tensor, n: int | torch.Tensor, k: int) -> torch.Tensor:
    """Unbiased pass@k per problem: 1 − C(n−c, k) / C(n, k), (P,) float64.

    ``c`` (P,) integer counts of correct samples out of ``n``: one int for every problem, or (P,) per
    problem (a run still in progress, or problems sampled unequally); requires 1 ≤ k ≤ every n.
    """
    c = torch.as_tensor(c, dtype=torch.float64)
    n_t = torch.as_tensor(n, dtype=torch.float64)
    if n_t.dim() and n_t.shape != c.shape:
        raise ValueError(f"n: expected one count or shape {tuple(c.shape)} (as c), got {tuple(n_t.shape)}")
    if n_t.numel() == 0:
        return c.clone()
    n_min = int(n_t.min())
    if not 1 <= k <= n_min:
        raise ValueError(f"k: must be in [1, n={n_min}], got {k}")
    if bool(((c < 0) | (c > n_t)).any()):
        raise ValueError(f"c: counts must be in [0, n={n if isinstance(n, int) else n_min}]")
    # C(n−c, k)/C(n, k) = Π_{i=0}^{k−1} (n−c−i)/(n−i); zero as soon as n−c < k
    i = torch.arange(k, dtype=torch.float64)
    ratio = ((n_t - c).unsqueeze(-1) - i).clamp_min(0) / (n_t.unsqueeze(-1) - i)
    return 1.0 - ratio.prod(dim=-1)


def average_at_k(c: torch.Tensor, n: int | torch.Tensor | None = None) -> torch.Tensor:
    """average@n per problem: the mean correctness of its samples, (P,) float64.

    From the counts of correct samples ``c`` (P,) out of ``n`` (one int, or (P,) per problem), as the
    store's view ``problem_outcomes.average``; or, with ``n`` omitted, from a (P, n) bool matrix of
    outcomes.
    """
    if n is None:
        correct = torch.as_tensor(c)
        return average_at_k(correct.sum(dim=1), correct.shape[1])
    return torch.as_tensor(c, dtype=torch.float64) / torch.as_tensor(n)


def majority_answer(answers: Sequence[str | None], *, equivalent: Callable[[str, str], bool] | None = None
                    ) -> int | None:
    """Index of the representative of the largest cluster of equivalent answers, or None.

    Answers are clustered in order: each answer (None = no answer, skipped) joins the first
    existing cluster whose representative it is equivalent to, tested as
    ``a == rep or equivalent(a, rep)`` with the new answer first; otherwise it opens a new cluster
    and is its representative (its first member). ``equivalent=None`` means exact string
    equality. The largest cluster wins; ties go to the cluster opened first, i.e. the one whose
    first member appears earliest. Cost: at most one call per (answer, earlier cluster) pair,
    ≤ n(n−1)/2 = 120 calls for n = 16.

    Returns the index into ``answers`` of the winning cluster's representative; None if every
    answer is None.
    """
    reps: list[int] = []  # index of each cluster's representative, in opening order
    sizes: list[int] = []
    for i, a in enumerate(answers):
        if a is None:
            continue
        for c, r in enumerate(reps):
            rep = answers[r]
            if a == rep or (equivalent is not None and equivalent(a, rep)):
                sizes[c] += 1
                break
        else:
            reps.append(i)
            sizes.append(1)
    if not reps:
        return None
    best = max(range(len(reps)), key=lambda c: (sizes[c], -c))  # ties: the cluster opened first
    return reps[best]


def maj_at_k(
    answers: Sequence[Sequence[str | None]],
    correct: torch.Tensor | Sequence[Sequence[bool]],
    k: int,
    *,
    equivalent: Callable[[str, str], bool] | None = None,
) -> torch.Tensor:
    """maj@k per problem over its first k samples: 1 if the majority answer is correct.

    Args:
        answers: P rows (one per problem) of extracted answer strings in sample order, None where
            a sample has no answer (never a majority). Rows may differ in length; each needs ≥ k.
        correct: (P, n) bool tensor, or P rows of bools, aligned with ``answers``.
        k: samples per problem to vote over, 1 ≤ k ≤ every row's length (maj@n: k = n).
        equivalent: ``equivalent(answer, representative) -> bool``, e.g. the verifier's
            mathematical equivalence; None = exact string equality.

    The first k answers of a problem are clustered by :func:`majority_answer` (each joins the
    first cluster whose representative it is equivalent to; ties between the largest clusters go
    to the cluster whose first member appears first). The problem scores the correctness of the
    winning cluster's representative, its first member; 0 if no sample has an answer.

    Returns:
        (P,) float64 of 0/1.
    """
    P = len(answers)
    if isinstance(correct, torch.Tensor):
        if correct.dim() != 2:
            raise ValueError(f"correct: expected shape (P, n), got {tuple(correct.shape)}")
        correct = correct.tolist()
    if len(correct) != P:
        raise ValueError(f"correct: expected {P} rows (as answers), got {len(correct)}")
    out = torch.zeros(P, dtype=torch.float64)
    for p in range(P):
        n = len(answers[p])
        if len(correct[p]) != n:
            raise ValueError(f"correct: row {p} has {len(correct[p])} entries, answers has {n}")
        if not 1 <= k <= n:
            raise ValueError(f"k: must be in [1, n={n}] (problem {p} has {n} samples), got {k}")
        best = majority_answer(answers[p][:k], equivalent=equivalent)
        if best is not None:
            out[p] = float(bool(correct[p][best]))
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


def agreement_2x2(a: torch.Tensor, b: torch.Tensor) -> dict[str, int]:
    """The 2×2 table of two graders' verdicts on the same samples: ``a``, ``b`` (N,) bool.

    Keys: both_correct, a_only (a says correct, b wrong), b_only, both_wrong.
    """
    a, b = torch.as_tensor(a, dtype=torch.bool), torch.as_tensor(b, dtype=torch.bool)
    if a.shape != b.shape or a.dim() != 1:
        raise ValueError(f"a, b: need two (N,) tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return {"both_correct": int((a & b).sum()), "a_only": int((a & ~b).sum()), "b_only": int((~a & b).sum()),
            "both_wrong": int((~a & ~b).sum())}


def cohens_kappa(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cohen's κ of two graders' binary verdicts on the same N samples, ``a``, ``b`` (N,) bool.

    κ = (p_o − p_e) / (1 − p_e): p_o the share of samples they agree on, p_e the agreement expected
    from their marginals alone. NaN where p_e = 1 (both give one verdict to every sample: κ is undefined)
    or N = 0.
    """
    t = agreement_2x2(a, b)
    n = sum(t.values())
    if n == 0:
        return math.nan
    p_o = (t["both_correct"] + t["both_wrong"]) / n
    pa, pb = (t["both_correct"] + t["a_only"]) / n, (t["both_correct"] + t["b_only"]) / n
    p_e = pa * pb + (1 - pa) * (1 - pb)
    return math.nan if p_e >= 1.0 else (p_o - p_e) / (1.0 - p_e)


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


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) by Lentz's continued fraction (converges for x < (a+1)/(a+b+2);
    the other side by symmetry)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return front * (f - 1.0)


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t distribution with ``df`` degrees of freedom (bisection on its CDF)."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile: need 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)

    def cdf(t: float) -> float:
        return 1.0 - 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return 0.5 * (lo + hi)


def seed_ci(values: Sequence[float] | torch.Tensor, *, alpha: float = 0.05) -> dict[str, float]:
    """Mean of one figure across independent seeds (S,) with its Student-t CI: seeds are the unit of
    replication, so the interval is mean ± t_{1−α/2, S−1} · sd / √S. With one seed the CI is NaN."""
    v = torch.as_tensor(values, dtype=torch.float64).flatten()
    s = v.numel()
    if s == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "sd": math.nan, "seeds": 0}
    mean = float(v.mean())
    if s == 1:
        return {"mean": mean, "lo": math.nan, "hi": math.nan, "sd": math.nan, "seeds": 1}
    sd = float(v.std(unbiased=True))
    half = t_quantile(1.0 - alpha / 2.0, s - 1) * sd / math.sqrt(s)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd, "seeds": s}
