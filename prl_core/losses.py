"""Policy losses and token statistics: pure functions over tensors (docs/architecture.md §The policy loss).

Shapes: B responses, T columns, V vocabulary; ``mask`` (B, T) bool marks response tokens.
Gradients flow only through ``logp`` (and ``logits`` for entropy); old-policy log-probs,
reference log-probs and advantages are detached inside every function.
"""

from __future__ import annotations

import torch

from ._checks import require_choice, require_float, require_mask

AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 20.0  # |log w| is clamped before exp, as verl does, so w never overflows


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` (B, T) over True positions of ``mask`` (B, T); 0 when the mask is empty.

    Values outside the mask never reach the result, even when they are NaN or ±inf.
    """
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp_min(1).to(x.dtype)


def aggregate(losses: torch.Tensor, mask: torch.Tensor, agg: str, *, norm: float | None = None) -> torch.Tensor:
    """Reduce per-token losses (B, T) to a scalar.

    ``token-mean``: mean over all response tokens of the batch (the authors' actor default).
    ``seq-mean-token-mean``: mean over each response's tokens, then over responses that have
    at least one token (the paper's Algorithm 1).

    ``norm``: divide by this count instead of the batch's own — the response tokens (token-mean) or
    the responses with a token (seq-mean-token-mean) of the whole mini-batch that this batch is one
    micro-batch of. The micro-batches' results then sum to the mini-batch's aggregate, however the
    mini-batch was split (the trainer's token-budget micro-batches).
    """
    agg = require_choice("agg", agg, AGGREGATIONS)
    if norm is not None and not norm > 0:
        raise ValueError(f"norm: expected a count > 0, got {norm!r}")
    kept = torch.where(mask, losses, 0.0)  # padding never contributes, even as NaN/inf
    if agg == "token-mean":
        return kept.sum() / (norm if norm is not None else mask.sum().clamp_min(1).to(losses.dtype))
    per_seq_tokens = mask.sum(-1).to(losses.dtype)
    per_seq = kept.sum(-1) / per_seq_tokens.clamp_min(1.0)
    has = (per_seq_tokens > 0).to(losses.dtype)
    return (per_seq * has).sum() / (norm if norm is not None else has.sum().clamp_min(1.0))


def ppo_clip_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    agg: str = "token-mean",
    logits: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    norm: float | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with an asymmetric range and dual clip on negative advantages.

    Per token, with w = exp(logp − logp_old) and advantage ρ:
    ℓ = −min(w·ρ, clip(w, 1 − clip_low, 1 + clip_high)·ρ); for ρ < 0 additionally
    ℓ ≤ dual_clip·|ρ| (Ye et al. 2020's dual clip; None disables it).

    Args:
        logp: (B, T) float log-probs of the sampled tokens under the current policy (grad flows).
        logp_old: (B, T) float log-probs under the rollout policy (detached).
        advantages: (B, T) float token weights, e.g. from :func:`prl_advantages` (detached).
        mask: (B, T) bool response-token mask.
        clip_low, clip_high: ε_low in (0, 1) and ε_high > 0.
        dual_clip: c > 1, or None.
        agg: ``"token-mean"`` or ``"seq-mean-token-mean"``.
        logits: optional (B, T, V) logits of the current policy; adds ``actor/entropy``.
        entropy: optional (B, T) per-token entropies already computed (e.g. by
            :func:`prl_core.logprobs.token_logprobs`, without the full logits); adds ``actor/entropy``.
        norm: the mini-batch's count for :func:`aggregate` when this batch is one of its micro-batches.
        is_weights: optional (B, T) off-policy weights of the rollout correction
            (:func:`prl_core.offpolicy.rollout_is_weights`, detached); each token's clipped loss is multiplied by
            its weight before aggregation (as verl and TRL do). Weights of exactly 1 leave the loss bit for bit.

    Returns:
        ``(loss, metrics)``: a scalar loss and detached scalar metrics — ``actor/pg_loss``,
        ``actor/clipfrac`` (tokens where the clipped branch is active), ``actor/clipfrac_dual``,
        ``actor/approx_kl`` (k3 estimate of KL(old‖new), ≥ 0), ``actor/ppo_kl`` (mean of
        logp_old − logp), ``actor/ratio_mean`` and, with logits, ``actor/entropy``.
    """
    mask = require_mask("mask", mask)
    logp = _masked_float("logp", logp, mask)
    logp_old = _masked_float("logp_old", logp_old, mask).detach()
    advantages = _masked_float("advantages", advantages, mask).detach()
    agg = require_choice("agg", agg, AGGREGATIONS)
    _check_clip(clip_low, clip_high, dual_clip)
    if logits is not None and entropy is not None:
        raise ValueError("logits, entropy: give one of them (the entropy metric comes from either)")
    if logits is not None:
        logits = require_float("logits", logits)
        if logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(mask.shape):
            raise ValueError(f"logits: expected shape {tuple(mask.shape)} + (V,), got {tuple(logits.shape)}")
    if entropy is not None:
        entropy = _masked_float("entropy", entropy, mask)

    # Padding may hold anything (e.g. -inf log-probs): zero it before it meets exp or a product.
    advantages = torch.where(mask, advantages, 0.0)
    log_ratio = torch.clamp(torch.where(mask, logp - logp_old, 0.0), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    dual_active = torch.zeros_like(clip_active)
    if dual_clip is not None:
        cap = -advantages * dual_clip  # = c·|ρ| for ρ < 0
        negative = advantages < 0
        dual_active = negative & (pg > cap)
        pg = torch.where(negative, torch.minimum(pg, cap), pg)
    if is_weights is not None:
        pg = pg * torch.where(mask, _masked_float("is_weights", is_weights, mask).detach(), 0.0)
    loss = aggregate(pg, mask, agg, norm=norm)

    with torch.no_grad():
        lr = log_ratio.detach()
        metrics = {
            "actor/pg_loss": loss.detach(),
            "actor/clipfrac": masked_mean(clip_active.to(logp.dtype), mask),
            "actor/clipfrac_dual": masked_mean(dual_active.to(logp.dtype), mask),
            "actor/approx_kl": masked_mean(torch.expm1(lr) - lr, mask),
            "actor/ppo_kl": masked_mean(-lr, mask),
            "actor/ratio_mean": masked_mean(ratio.detach(), mask),
        }
        if logits is not None:
            metrics["actor/entropy"] = masked_mean(token_entropy(logits.detach()), mask)
        elif entropy is not None:
            metrics["actor/entropy"] = masked_mean(entropy.detach(), mask)
    return loss, metrics


def _masked_float(name: str, x: object, mask: torch.Tensor) -> torch.Tensor:
    """A float tensor shaped like ``mask`` with no NaN on masked-in positions (padding is free)."""
    t = require_float(name, x, tuple(mask.shape), allow_nan=True)
    if bool(torch.isnan(t.detach()[mask]).any()):
        b, j = (int(i) for i in torch.nonzero(torch.isnan(t.detach()) & mask)[0])
        raise ValueError(f"{name}: NaN at response token (row {b}, column {j})")
    return t


def _check_clip(clip_low: float, clip_high: float, dual_clip: float | None) -> None:
    if not 0.0 < clip_low < 1.0:
        raise ValueError(f"clip_low: must be in (0, 1), got {clip_low}")
    if not clip_high > 0.0:
        raise ValueError(f"clip_high: must be > 0, got {clip_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip: must be > 1 (or None to disable), got {dual_clip}")


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, *, agg: str = "token-mean",
             norm: float | None = None) -> torch.Tensor:
    """Negative log-likelihood of the response tokens (RAFT's fine-tuning loss).

    Args:
        logp: (B, T) float log-probs of the target tokens (grad flows).
        mask: (B, T) bool; for RAFT, response tokens of the selected responses only.
        norm: the mini-batch's count for :func:`aggregate` when this batch is one of its micro-batches.
    """
    mask = require_mask("mask", mask)
    logp = _masked_float("logp", logp, mask)
    return aggregate(-torch.where(mask, logp, 0.0), mask, agg, norm=norm)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution, (B, T, V) logits → (B, T) nats."""
    logits = require_float("logits", logits)
    if logits.dim() != 3:
        raise ValueError(f"logits: expected shape (B, T, V), got {tuple(logits.shape)}")
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits  # at least fp32
    logp = torch.log_softmax(work, dim=-1)
    p = logp.exp()
    # 0·log 0 = 0: tokens masked out of the vocabulary (logit −inf) add nothing
    return -torch.where(p > 0, p * logp, 0.0).sum(-1).to(logits.dtype)


def kl_penalty(logp: torch.Tensor, logp_ref: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π‖π_ref) from sampled-token log-probs, (B, T) → (B, T).

    ``k1`` = log r, ``k2`` = ½(log r)², ``k3`` = r⁻¹ − 1 + log r with r = π/π_ref (Schulman's
    estimators; k3 is unbiased and ≥ 0). Gradient flows through ``logp`` only.
    """
    kind = require_choice("kind", kind, KL_ESTIMATORS)
    logp = require_float("logp", logp)
    logp_ref = require_float("logp_ref", logp_ref, tuple(logp.shape)).detach()
    d = torch.clamp(logp - logp_ref, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d * d
    return torch.expm1(-d) + d
