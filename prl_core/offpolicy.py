"""Off-policy correction from the rollout engine's own log-probs (docs/architecture.md §Off-policy correction).

The engine samples from its own copy of the weights with its own kernels (vLLM's bf16 kernels on a GPU differ
from the trainer's), so a rollout comes from a behaviour policy μ that is close to, but not, the trainer's
π_old. The engine returns log μ(y_t|·) of every sampled token; the policy loss weights each token by the
importance ratio r = π_old/μ:

* ``tis`` — truncated IS: w = min(r, C) (Yao et al. 2025's TIS; verl's ``rollout_is``, TRL's
  ``vllm_importance_sampling_correction`` with ``*_truncate``);
* ``mis`` — masked IS: w = r inside [1/C, C], 0 outside (the token, or the whole response, is dropped);
* ``off`` — no weight (the ratios are still measured and logged).

``level`` ``token`` uses each token's own ratio; ``sequence`` the response's product Π_t r_t, broadcast over
its tokens (with a linear baseline such as Dr.GRPO's centring, this weight makes the expected gradient exactly
the on-policy one: tests/test_offpolicy.py). A behaviour log-prob equal to the trainer's gives r = 1 exactly,
so the weighted loss is the unweighted one bit for bit.

Later, bounded-staleness asynchronous rollouts change which weights μ was (an older policy version), not
this correction: μ is whatever sampled the rollout, π_old the policy the update starts from.

Shapes: (B, T) log-probs and a (B, T) bool mask of response tokens.
"""

from __future__ import annotations

import torch

from ._checks import require_choice, require_float, require_mask

IS_MODES = ("tis", "mis", "off")
IS_LEVELS = ("token", "sequence")
LOG_RATIO_CLAMP = 20.0
"""|log r| is clamped before exp (as the policy loss clamps its ratio)."""


@torch.no_grad()
def rollout_is_weights(
    logp_old: torch.Tensor,
    logp_behavior: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str = "tis",
    level: str = "token",
    cap: float = 2.0,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Importance weights of the behaviour policy's samples, and what they measured.

    Args:
        logp_old: (B, T) the trainer's log-probs of the sampled tokens under the policy the update starts from.
        logp_behavior: (B, T) the rollout engine's log-probs of the same tokens (what it sampled from).
        mask: (B, T) bool response tokens.
        mode: ``tis``, ``mis`` or ``off``; level: ``token`` or ``sequence``; cap: C > 1.

    Returns:
        ``(weights, metrics)``: (B, T) detached weights, zero outside ``mask`` (None with ``off``), and floats
        ``rollout/is_weight_mean`` and ``rollout/is_weight_max`` (the ratio r = π_old/μ before truncation or
        masking, over response tokens at token level, over responses at sequence level),
        ``rollout/is_clipped_frac`` (the share of those truncated or masked; 0 with ``off``) and
        ``rollout/mismatch_kl`` (k3 estimate of KL(μ ‖ π_old) per response token: r − 1 − log r, ≥ 0).
    """
    mode = require_choice("mode", mode, IS_MODES)
    level = require_choice("level", level, IS_LEVELS)
    mask = require_mask("mask", mask)
    logp_old = require_float("logp_old", logp_old, tuple(mask.shape), allow_nan=True)
    logp_behavior = require_float("logp_behavior", logp_behavior, tuple(mask.shape), allow_nan=True)
    if not cap > 1.0:
        raise ValueError(f"cap: must be > 1, got {cap!r}")
    work = torch.promote_types(torch.promote_types(logp_old.dtype, logp_behavior.dtype), torch.float32)
    diff = torch.where(mask, logp_old.to(work) - logp_behavior.to(work), 0.0)
    bad = mask & ~torch.isfinite(diff)
    if bool(bad.any()):
        b, j = (int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"logp_old - logp_behavior: non-finite at response token (row {b}, column {j})")
    log_r = diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    has = mask.any(-1)
    if level == "sequence":
        seq = diff.sum(-1).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = torch.exp(seq)[:, None].expand_as(log_r)
        measured = torch.exp(seq)[has]
    else:
        ratio = torch.exp(log_r)
        measured = ratio[mask]
    if mode == "tis":
        out = ratio > cap
        weights = torch.clamp(ratio, max=cap)
    elif mode == "mis":
        out = (ratio > cap) | (ratio < 1.0 / cap)
        weights = torch.where(out, 0.0, ratio)
    else:
        out = torch.zeros_like(mask)
        weights = None
    clipped = (out[has][:, 0] if level == "sequence" else out[mask]) if mode != "off" else torch.zeros(0, dtype=torch.bool)
    r_tok = torch.exp(log_r)[mask]
    metrics = {
        "rollout/is_weight_mean": float(measured.mean()) if measured.numel() else float("nan"),
        "rollout/is_weight_max": float(measured.max()) if measured.numel() else float("nan"),
        "rollout/is_clipped_frac": float(clipped.double().mean()) if clipped.numel() else 0.0,
        "rollout/mismatch_kl": float((r_tok - 1.0 - log_r[mask]).mean()) if r_tok.numel() else float("nan"),
    }
    if weights is not None:
        weights = torch.where(mask, weights, 0.0).to(logp_old.dtype)
    return weights, metrics
