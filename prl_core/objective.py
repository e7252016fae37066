"""The training surrogate of one micro-batch, for every estimator: the one home of what the trainer
differentiates (docs/architecture.md §The policy loss).

    loss = policy term  (PPO-clip on the estimator's weights ρ, each token weighted by the off-policy correction;
                          RAFT: SFT on the selected responses)
         + (1/η) · aggregate(f(u_t(θ)))        the divergence's local term, where it is not zero in expectation
         + kl_loss_coef · mean_t k(π_θ, π_ref)  the loss-side KL penalty of the baseline arms (k1/k2/k3)

At θ = θ_old (the first update of a step) the PPO ratio is 1 and the expected gradient of this loss is the exact
gradient of the regularised objective for ``frpo`` (tests/test_frpo_exact.py enumerates it).

Shapes: B responses, T columns; ``mask`` (B, T) bool response tokens.
"""

from __future__ import annotations

import math

import torch

from .divergences import local_term
from .estimators import get_estimator
from .losses import aggregate, kl_penalty, masked_mean, ppo_clip_loss, sft_loss


def surrogate_loss(
    cfg,
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropy: torch.Tensor | None = None,
    norm: float | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss the trainer backpropagates for one micro-batch, and its metrics.

    Args:
        cfg: the run's ``AlgorithmConfig``.
        logp: (B, T) log-probs of the sampled tokens under the current policy (grad flows).
        logp_old: (B, T) under the policy the step started from (detached).
        logp_ref: (B, T) under the frozen reference; needed by a regularised estimator's local term and by
            ``kl_loss_coef`` > 0 (else may be None).
        advantages: (B, T) the estimator's weights ρ (:func:`prl_core.estimators.compute_advantages`).
        mask: (B, T) bool.
        entropy: optional (B, T) per-token entropies (the ``actor/entropy`` metric).
        norm: the mini-batch's count when this is one of its micro-batches (:func:`prl_core.losses.aggregate`).
        is_weights: optional (B, T) off-policy weights (:func:`prl_core.offpolicy.rollout_is_weights`), applied to
            the policy term and the local term (RAFT's SFT and the loss-side KL take none).

    Returns:
        ``(loss, metrics)``: ``actor/loss`` and the policy loss's metrics, plus ``actor/divergence_local`` and
        ``actor/kl_loss`` when those terms are present.
    """
    est = get_estimator(cfg.estimator)
    if est.loss == "sft":  # RAFT: likelihood of the selected (correct) responses
        loss = sft_loss(logp, mask & (advantages > 0), agg=cfg.loss_agg, norm=norm)
        metrics = {"actor/sft_loss": loss.detach()}
        if entropy is not None:
            metrics["actor/entropy"] = masked_mean(entropy, mask)
    else:
        loss, metrics = ppo_clip_loss(logp, logp_old, advantages, mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                      dual_clip=cfg.dual_clip, agg=cfg.loss_agg, entropy=entropy, norm=norm,
                                      is_weights=is_weights)
    if est.local_term and not math.isinf(cfg.eta):
        if logp_ref is None:
            raise ValueError(f"logp_ref: the {cfg.estimator} estimator's regulariser needs the reference log-probs")
        local = local_term(logp, logp_ref, mask, cfg.divergence)
        if local is not None:
            if is_weights is not None:
                local = local * is_weights.detach()
            reg = aggregate(local, mask, cfg.loss_agg, norm=norm)
            loss = loss + reg / cfg.eta
            metrics["actor/divergence_local"] = reg.detach()
    if cfg.kl_loss_coef > 0:
        if logp_ref is None:
            raise ValueError("logp_ref: kl_loss_coef > 0 needs the reference log-probs")
        kl = masked_mean(kl_penalty(logp, logp_ref, cfg.kl_estimator), mask)
        loss = loss + cfg.kl_loss_coef * kl
        metrics["actor/kl_loss"] = kl.detach()
    metrics["actor/loss"] = loss.detach()
    return loss, metrics
