"""Advantages and PRL token weights: pure functions over tensors (docs/architecture.md §The PRL math).

Shapes: B responses (rows), T columns; ``mask`` (B, T) bool marks response tokens.
A *group* is the n responses of one prompt, identified by ``group_ids`` (B,) long.
Nothing here takes gradients: every result is computed under ``torch.no_grad``.

Step splits take one path: a split string becomes a boundary mask through
:func:`~prl_core.boundaries.step_boundaries` and goes through the same boundary/fill code as an explicit
mask (an empty row gives 0, whatever its padding holds). Token level (``boundaries=None``) keeps its
direct formula ρ = A − S/η: there is nothing to fill, and it is the definition itself.
"""

from __future__ import annotations

import math

import torch

from ._checks import (
    require_choice, require_eta, require_float, require_group_ids, require_mask, require_rollout_batch,
)
from .boundaries import StepSplit, parse_split, step_boundaries
from .divergences import DEFAULT_DIVERGENCE, get_divergence, token_values

ORDERS = ("advantage_first", "process_first")
STEP_VALUES = ("end", "start")
"""Where a step's return-to-go is read (docs/architecture.md §PRL v1 and FRPO v2, term by term): ``end``, at the
step's last token (PRL v1 and the authors' code: S_{i,e}), or ``start``, at its first token (FRPO: S_{i,s}, the
whole step's future; in expectation the exact gradient of the token-wise regulariser)."""


# ─── group statistics ───────────────────────────────────────────────────────────────

def _group_normalize(
    values: torch.Tensor, group: torch.Tensor, n_groups: int, *, normalize_std: bool, eps: float
) -> torch.Tensor:
    """(v − mean_g) / (std_g + eps) over the members of each group, std unbiased.

    values (N,) float, group (N,) long in [0, n_groups). A group with one member returns its
    value unchanged (no baseline); a group whose values are all equal returns exactly 0.
    """
    dt = values.dtype
    count = torch.zeros(n_groups, dtype=dt, device=values.device).index_add_(0, group, torch.ones_like(values))
    total = torch.zeros(n_groups, dtype=dt, device=values.device).index_add_(0, group, values)
    mean = (total / count)[group]
    centered = values - mean
    out = centered
    if normalize_std:
        sq = torch.zeros(n_groups, dtype=dt, device=values.device).index_add_(0, group, centered * centered)
        std = torch.sqrt(sq / (count - 1).clamp_min(1))[group]
        out = centered / (std + eps)
    vmax = torch.full((n_groups,), -math.inf, dtype=dt, device=values.device).scatter_reduce_(0, group, values, "amax")
    vmin = torch.full((n_groups,), math.inf, dtype=dt, device=values.device).scatter_reduce_(0, group, values, "amin")
    out = torch.where((vmax == vmin)[group], torch.zeros_like(out), out)
    return torch.where(count[group] == 1, values, out)


def _dense_groups(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Relabel arbitrary group ids to 0..G-1; returns (ids (B,), G)."""
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(uniq.numel())


@torch.no_grad()
def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO outcome advantage A_i = (R_i − mean_g R) / (std_g R + eps), std unbiased (n − 1).

    Args:
        rewards: (B,) float outcome rewards.
        group_ids: (B,) integer prompt id of each response (any values; need not be sorted).
        normalize_std: False gives the Dr.GRPO advantage R_i − mean_g R.
        eps: added to the std.

    Returns:
        (B,) advantages in the dtype of ``rewards`` (float32 for half-precision rewards). A group
        of one gives A = R; a group whose rewards are all equal gives exactly 0.
    """
    rewards = require_float("rewards", rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards: expected shape (B,), got {tuple(rewards.shape)}")
    if torch.isinf(rewards).any():
        raise ValueError("rewards: contains inf")
    group, n_groups = _dense_groups(require_group_ids("group_ids", group_ids, rewards.shape[0]))
    rewards = rewards.detach().to(_stat_dtype(rewards.dtype))
    if rewards.numel() == 0:
        return rewards.clone()
    return _group_normalize(rewards, group, n_groups, normalize_std=normalize_std, eps=eps)


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """Group statistics and sums run in at least float32 (bf16 counts stop at 256)."""
    return torch.promote_types(dtype, torch.float32)


# ─── suffix sums and segment fill ───────────────────────────────────────────────────

@torch.no_grad()
def suffix_sums(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Inclusive reverse cumulative sum S_t = Σ_{j ≥ t} mask_j · values_j.

    Args:
        values: (B, T) float.
        mask: (B, T) bool; masked-out positions contribute 0 (their own S is still defined).

    Returns:
        (B, T) in the dtype of ``values``. One reverse cumsum, O(T) per row.
    """
    values = require_float("values", values, allow_nan=True)
    mask = require_mask("mask", mask)
    _same_shape(("mask", mask), ("values", values))
    if torch.isnan(values[mask]).any():
        raise ValueError("values: contains NaN at a masked-in position")
    return _suffix_sums_(values.detach().masked_fill(~mask, 0.0))


def _suffix_sums_(masked: torch.Tensor) -> torch.Tensor:
    """Suffix sums of an already-masked (B, T) tensor, overwriting a fresh buffer.

    S_t = total − C_t + x_t with C the forward inclusive cumsum: one cumsum and no reversed
    copies (flip-cumsum-flip costs ~2× more here). S at a row's last token is exactly x_t; the
    rounding elsewhere is a few ulp of the row's running sum.
    """
    c = torch.cumsum(masked, -1)
    total = c[:, -1:].clone() if c.shape[-1] else c[:, :0]
    return c.sub_(total).neg_().add_(masked)


@torch.no_grad()
def fill_segments(values: torch.Tensor, boundaries: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Give each response token the value at the next boundary at or after it.

    Args:
        values: (B, T) float; only the values at boundary positions are read.
        boundaries: (B, T) bool, a subset of ``mask`` containing every row's last response token.
        mask: (B, T) bool.

    Returns:
        (B, T), zero outside ``mask``. Uses the boundary mask itself, so a boundary whose value
        is exactly 0 keeps its 0 (unlike a "next non-zero value" fill).
    """
    values = require_float("values", values)
    mask = require_mask("mask", mask)
    boundaries = require_mask("boundaries", boundaries)
    _same_shape(("mask", mask), ("values", values), ("boundaries", boundaries))
    values = values.detach()
    if mask.shape[1] == 0:
        return values.clone()
    pos = _boundary_positions(boundaries, mask)
    return _fill(values.reshape(-1)[pos], pos, boundaries, mask)


def _boundary_positions(boundaries: torch.Tensor, mask: torch.Tensor, mask_f: torch.Tensor | None = None) -> torch.Tensor:
    """Row-major flat positions (K,) of the boundaries, after checking they fit the mask.

    ``mask_f``: ``mask`` as a 0/1 float tensor, if the caller has one (saves a conversion).
    """
    B, T = mask.shape
    pos = torch.nonzero(boundaries.reshape(-1)).squeeze(1)
    if not bool(mask.reshape(-1)[pos].all()):
        raise ValueError("boundaries: marks positions outside mask (boundaries must be response tokens)")
    exact = torch.float32 if T < 2**24 else torch.float64  # column indices must be exact
    if mask_f is None or mask_f.dtype not in (torch.float32, torch.float64) or (exact == torch.float64 and mask_f.dtype != exact):
        mask_f = mask.view(torch.uint8).to(exact)
    cols = torch.arange(T, device=mask.device, dtype=mask_f.dtype)
    last_tok = (mask_f * cols).amax(-1).long()  # last response column (0 for an empty row)
    has_tok = mask[:, 0] | (last_tok > 0)
    last_bnd = torch.full((B,), -1, dtype=torch.int64, device=mask.device)
    last_bnd.scatter_reduce_(0, pos // T, pos % T, "amax")
    bad = has_tok & (last_bnd != last_tok)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise ValueError(
            f"boundaries: row {row} has no boundary at its last response token (column {int(last_tok[row])}); "
            "build boundaries with prl_core.step_boundaries()"
        )
    return pos


def _fill(
    at_boundaries: torch.Tensor,
    pos: torch.Tensor,
    boundaries: torch.Tensor,
    mask: torch.Tensor,
    out: torch.Tensor | None = None,
    mask_f: torch.Tensor | None = None,
) -> torch.Tensor:
    """Spread boundary values (K,) at row-major flat positions ``pos`` (K,) over their segments.

    A token's segment index is the number of boundaries strictly before it in its row (one
    exclusive int32 cumsum); the values are laid out as a zero-padded (B, K_max + 1) table and
    gathered. ``out`` (B, T), if given, receives the result: reusing buffers matters on CPU,
    where every fresh multi-MB tensor costs page faults. ``mask_f`` is ``mask`` as 0/1 in the
    values' dtype, when the caller already has it (saves a conversion pass).
    """
    B, T = mask.shape
    row = pos // T
    counts = torch.bincount(row, minlength=B)
    width = (int(counts.max()) if B else 0) + 1
    rank = torch.arange(pos.numel(), device=pos.device) - (torch.cumsum(counts, 0) - counts)[row]
    table = torch.zeros(B, width, dtype=at_boundaries.dtype, device=at_boundaries.device)
    table[row, rank] = at_boundaries
    # Exclusive count = inclusive count of the row shifted right by one column. Past a row's
    # last boundary it equals the row's total, which points at a zero of the table.
    seg = torch.empty(B, T, dtype=torch.int32, device=mask.device)
    if T:
        seg[:, 0] = 0
        torch.cumsum(boundaries[:, :-1].view(torch.uint8), -1, dtype=torch.int32, out=seg[:, 1:])
    if out is None:
        out = torch.empty(B, T, dtype=at_boundaries.dtype, device=at_boundaries.device)
    torch.gather(table, 1, seg.long(), out=out)
    return out.mul_(mask_f if mask_f is not None else mask.view(torch.uint8))


# ─── PRL ────────────────────────────────────────────────────────────────────────────

@torch.no_grad()
def prl_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    mask: torch.Tensor,
    *,
    eta: float,
    boundaries: torch.Tensor | str | None = None,
    order: str = "advantage_first",
    normalize_std: bool = True,
    eps: float = 1e-6,
    divergence: str = DEFAULT_DIVERGENCE,
    step_value: str = "end",
) -> torch.Tensor:
    """PRL token weights ρ (docs/architecture.md §Advantages and ρ).

    With k_t = log π_old − log π_ref on response tokens and S_t = Σ_{j≥t} k_j:

    - ``advantage_first`` (the paper's main setting): ρ_{i,t} = A_i − S_{i,t}/η, with A the
      group outcome advantage of :func:`group_advantages`. ``eta=math.inf`` returns A broadcast
      over the response, exactly.
    - ``process_first`` (Table 5's other order): r_{i,t} = R_i − S_{i,t}/η at every boundary,
      then normalized over all boundary values of all responses of the group (mean and
      unbiased std), then filled. (Not the same as GRPO at η=∞: responses with more steps
      weigh more in the group statistics.)

    Args:
        rewards: (B,) float outcome rewards R_i.
        group_ids: (B,) integer prompt id of each response.
        logp_old: (B, T) float rollout-policy log-probs of the sampled tokens.
        logp_ref: (B, T) float frozen-reference log-probs of the same tokens.
        mask: (B, T) bool response-token mask. Values outside it are ignored (may be NaN).
        eta: inverse KL strength (> 0; ``math.inf`` switches the KL term off).
        boundaries: (B, T) bool step boundaries from :func:`prl_core.boundaries.step_boundaries`;
            None means token level (every token is a step). A split string ``"token"`` or
            ``"fixed:N"`` is also accepted and gives the same result (it is turned into the
            boundary mask with ``step_boundaries``).
        order: ``"advantage_first"`` or ``"process_first"``.
        normalize_std: divide by the group std (False: Dr.GRPO-style centering only).
        eps: added to the std.
        divergence: the token-wise regulariser f (:mod:`prl_core.divergences`): k_t above becomes
            f(u_t), u_t = π_ref/π_old of the sampled token, and S its return-to-go Σ_{j≥t} f(u_j).
            ``reverse_kl`` (f = −log u, so f(u_t) = k_t) is PRL itself, computed on the same path bit for bit.
        step_value: ``end`` (PRL v1: a step's tokens carry the value at its last token) or ``start`` (FRPO:
            the value at its first token, S over the whole step; advantage first only). Token level: the same.

    Returns:
        (B, T) weights in the dtype of ``logp_old``, zero outside ``mask``; every token of a
        segment carries the value at the segment's boundary (``start``: at its first token). No
        gradient flows through it.
    """
    eta = require_eta(eta)
    order = require_choice("order", order, ORDERS)
    step_value = require_choice("step_value", step_value, STEP_VALUES)
    div = get_divergence(divergence)
    if step_value == "start" and order != "advantage_first":
        raise ValueError("step_value: 'start' (FRPO) is defined after advantage construction: use "
                         "order='advantage_first'")
    rewards, mask = require_rollout_batch(rewards, logp_old, logp_ref, mask)
    B = rewards.shape[0]
    group, n_groups = _dense_groups(require_group_ids("group_ids", group_ids, B))
    T = mask.shape[1]
    out_dtype = logp_old.dtype
    # Arithmetic runs in at least float32 whatever the inputs (half-precision sums and counts
    # round badly); the result is cast back to logp_old's dtype at the end.
    work = _stat_dtype(torch.promote_types(logp_old.dtype, logp_ref.dtype))
    old_w, ref_w = logp_old.detach().to(work), logp_ref.detach().to(work)
    if div.name != "reverse_kl" and not math.isinf(eta):
        # f(u_t) in the place of k_t = log π_old − log π_ref: the same suffix machinery over (f(u), 0)
        old_w, ref_w = token_values(old_w, ref_w, div.name), torch.zeros_like(old_w)
    rewards = rewards.detach().to(_stat_dtype(rewards.dtype))
    if T == 0:
        if isinstance(boundaries, (str, StepSplit)):
            parse_split(boundaries)
        return torch.zeros(B, 0, dtype=out_dtype, device=mask.device)
    # 0/1 mask in the working dtype, made once: multiplying by it is the cheap way to mask.
    mask_f = mask.view(torch.uint8).to(work)
    if isinstance(boundaries, (str, StepSplit)):
        split = parse_split(boundaries)
        if split.kind == "text":
            raise ValueError(
                f"boundaries: a {str(split)!r} split needs each token's text; pass "
                "step_boundaries(mask, split, token_texts) instead of the split string"
            )
        boundaries = step_boundaries(mask, split) if split.kind == "fixed" else None
    pos = None
    if boundaries is not None:
        boundaries = require_mask("boundaries", boundaries)
        _same_shape(("mask", mask), ("boundaries", boundaries))
        pos = _boundary_positions(boundaries, mask, mask_f)

    # With k = log π_old − log π_ref on response tokens, E its exclusive prefix sum and Σ the
    # row total, the suffix sum is S = Σ − E: one forward cumsum. (Skipped entirely at η = ∞,
    # so GRPO is reproduced exactly.)
    excl = total = None
    if not math.isinf(eta):
        excl, total = _exclusive_prefix(old_w, ref_w, mask, mask_f, originals=(logp_old, logp_ref))

    def kl_to_go_at(flat_pos: torch.Tensor) -> torch.Tensor:  # S/η at flat positions (K,)
        return (total[flat_pos // T] - excl.reshape(-1)[flat_pos]) / eta

    if order == "advantage_first":
        adv = _group_normalize(rewards, group, n_groups, normalize_std=normalize_std, eps=eps) if B else rewards
        if excl is None:  # exactly group_advantages(rewards) broadcast over the response
            return torch.where(mask, adv.to(out_dtype).unsqueeze(1), 0.0).to(out_dtype)
        adv = adv.to(work)
        if pos is None:
            # ρ = A − (Σ − E)/η = (A − Σ/η) + E/η, in place on the prefix buffer
            row_const = (adv - total / eta).unsqueeze(1)
            return excl.mul_(1.0 / eta).add_(row_const).mul_(mask_f).to(out_dtype)
        if step_value == "end":
            at_b = adv[pos // T] - kl_to_go_at(pos)
        else:  # S at each step's first token: the row total minus the inclusive prefix at the previous boundary
            row = pos // T
            incl = excl.reshape(-1)[pos] + ((old_w - ref_w) * mask_f).reshape(-1)[pos]
            before = torch.cat([incl.new_zeros(1), incl[:-1]])
            first = torch.cat([torch.ones(1, dtype=torch.bool, device=row.device), row[1:] != row[:-1]])
            at_b = adv[row] - (total[row] - torch.where(first, 0.0, before)) / eta
        return _fill(at_b, pos, boundaries, mask, out=excl, mask_f=mask_f).to(out_dtype)

    # process first: per-boundary returns, normalized over the group's boundary values.
    if pos is None:
        boundaries = mask
        pos = torch.nonzero(mask.reshape(-1)).squeeze(1)
    row = pos // T
    rewards = rewards.to(work)
    r = rewards[row] if excl is None else rewards[row] - kl_to_go_at(pos)
    normed = _group_normalize(r, group[row], n_groups, normalize_std=normalize_std, eps=eps)
    return _fill(normed, pos, boundaries, mask, out=excl, mask_f=mask_f).to(out_dtype)


@torch.no_grad()
def fused_kl_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    mask: torch.Tensor,
    *,
    eta: float,
    divergence: str = DEFAULT_DIVERGENCE,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """The regulariser fused into the reward *before* group normalisation (the variant arXiv 2601.10201v2 argues
    against; docs/architecture.md §The comparison arms): R'_i = R_i − (1/η) Σ_t f(u_{i,t}), then the GRPO
    advantage of R' broadcast over the response.

    Args: as :func:`prl_advantages` (no steps, no order). ``eta=math.inf`` returns GRPO's advantage exactly.

    Returns:
        (B, T) in the dtype of ``logp_old``, zero outside ``mask``; every token of a response carries its A'_i.
    """
    eta = require_eta(eta)
    get_divergence(divergence)
    rewards, mask = require_rollout_batch(rewards, logp_old, logp_ref, mask)
    group, n_groups = _dense_groups(require_group_ids("group_ids", group_ids, rewards.shape[0]))
    rewards = rewards.detach().to(_stat_dtype(rewards.dtype))
    if not math.isinf(eta) and mask.shape[1]:
        work = _stat_dtype(torch.promote_types(logp_old.dtype, logp_ref.dtype))
        values = token_values(logp_old.detach().to(work), logp_ref.detach().to(work), divergence)
        bad = mask & ~torch.isfinite(values)
        if bool(bad.any()):
            b, j = (int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(f"logp_old, logp_ref: non-finite regulariser value at response token (row {b}, column {j})")
        rewards = rewards.to(work) - torch.where(mask, values, 0.0).sum(-1) / eta
    adv = _group_normalize(rewards, group, n_groups, normalize_std=normalize_std, eps=eps) if rewards.numel() else rewards
    return torch.where(mask, adv.to(logp_old.dtype).unsqueeze(1), 0.0).to(logp_old.dtype)


def _exclusive_prefix(logp_old: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor, mask_f: torch.Tensor, originals):
    """E (B, T) = Σ_{j<t} k_j, the exclusive prefix sum of k = log-ratio on response tokens, and row totals Σ (B,).

    Then S_t = Σ − E_t. E is built in one buffer: k is written shifted right by one column and
    summed in place, so no separate k tensor exists. Multiplying by the 0/1 mask is the fast way
    to zero padding, but NaN·0 = NaN: if a row total is not finite, padding held NaN/inf, so
    zero it properly and check the response tokens.
    """
    B, T = mask.shape
    excl = torch.empty(B, T, dtype=mask_f.dtype, device=mask.device)
    excl[:, 0] = 0.0
    torch.sub(logp_old[:, :-1], logp_ref[:, :-1], out=excl[:, 1:]).mul_(mask_f[:, :-1])
    last = (logp_old[:, -1] - logp_ref[:, -1]) * mask_f[:, -1]
    torch.cumsum(excl, -1, out=excl)
    total = excl[:, -1] + last
    if not bool(torch.isfinite(total).all()):
        outside = ~mask
        torch.sub(logp_old[:, :-1], logp_ref[:, :-1], out=excl[:, 1:]).masked_fill_(outside[:, :-1], 0.0)
        last = (logp_old[:, -1] - logp_ref[:, -1]).masked_fill_(outside[:, -1], 0.0)
        torch.cumsum(excl, -1, out=excl)
        total = excl[:, -1] + last
        _check_finite(total, *originals, mask)
    return excl, total


def _check_finite(total: torch.Tensor, logp_old, logp_ref, mask) -> None:
    """Row totals of the masked log-ratio are finite iff every response token's was."""
    if bool(torch.isfinite(total).all()):
        return
    for name, t in (("logp_old", logp_old), ("logp_ref", logp_ref)):
        bad = mask & ~torch.isfinite(t)
        if bad.any():
            b, j = (int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(f"{name}: non-finite value {float(t[b, j])} at response token (row {b}, column {j})")
    raise ValueError("logp_old - logp_ref: the log-ratio sum overflowed to a non-finite value")


def _same_shape(*named: tuple[str, torch.Tensor]) -> None:
    """The first (name, tensor) is the reference; a mismatch names the other argument."""
    (n0, t0), *rest = named
    for n, t in rest:
        if t.shape != t0.shape:
            raise ValueError(f"{n}: expected shape {tuple(t0.shape)} (as {n0}), got {tuple(t.shape)}")


# ─── RAFT ───────────────────────────────────────────────────────────────────────────

@torch.no_grad()
def raft_select(rewards: torch.Tensor, group_ids: torch.Tensor, *, threshold: float = 1.0) -> torch.Tensor:
    """RAFT sample selection: keep the correct responses (reward ≥ threshold) of every group.

    Args:
        rewards: (B,) float.
        group_ids: (B,) integer (validated; selection is per response, so groups with no
            correct response contribute nothing).
        threshold: reward at or above which a response counts as correct.

    Returns:
        bool (B,) — the responses to fine-tune on.
    """
    rewards = require_float("rewards", rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards: expected shape (B,), got {tuple(rewards.shape)}")
    require_group_ids("group_ids", group_ids, rewards.shape[0])
    return rewards >= threshold
