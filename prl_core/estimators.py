"""One registry of advantage estimators, one signature (as verl's ``core_algos``).

Every estimator maps a rollout batch to per-token weights (B, T) and names the loss that
consumes them: ``"ppo"`` (:func:`prl_core.losses.ppo_clip_loss`) or ``"sft"``
(:func:`prl_core.losses.sft_loss` over tokens whose weight is non-zero, RAFT).

    fn(rewards (B,), group_ids (B,), logp_old (B, T), logp_ref (B, T), mask (B, T) bool,
       *, cfg: AlgorithmConfig, boundaries: (B, T) bool | None) -> (B, T)

The registry owns the estimators' names, what each one is (``summary``, ``source``: the paper version and
place it implements, arXiv 2601.10201 v1 or v2) and the constraints ``prl_core.config.AlgorithmConfig``
checks against them (``needs_group``, ``keys``, ``normalize_std``), so this module does not import
the config (``AlgorithmConfig`` in annotations is the name only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ._checks import require_rollout_batch
from .advantages import fused_kl_advantages, group_advantages, prl_advantages, raft_select
from .divergences import DEFAULT_DIVERGENCE

EstimatorFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its function and what ``AlgorithmConfig`` checks against it."""

    name: str
    fn: EstimatorFn
    loss: str  # "ppo" or "sft"
    uses_steps: bool  # whether step boundaries change the result
    uses_reference: bool = False  # whether the reference's log-probs change the result
    needs_group: bool = False  # a group baseline: needs n_samples >= 2 responses per prompt
    keys: tuple[str, ...] = ()  # the estimator-specific AlgorithmConfig keys (ESTIMATOR_KEYS) this one reads
    normalize_std: bool | None = None  # fixed by the definition (dr_grpo: False); None: the config's choice
    summary: str = ""  # what it is, in one line (prl train --help, the docs)
    source: str = ""  # the paper version and place it implements (arXiv 2601.10201 v1 / v2), or another paper
    step_value: str | None = None  # where a step's return-to-go is read: 'end' (v1) or 'start' (FRPO); None: no steps
    local_term: bool = False  # the loss adds the divergence's local term (prl_core.divergences.local_term)


ESTIMATORS: dict[str, Estimator] = {}

ESTIMATOR_KEYS = ("eta", "step_split", "order", "divergence")
"""The ``AlgorithmConfig`` keys that only some estimators read (each estimator's ``keys`` are a subset): given
with an estimator that does not read them, ``AlgorithmConfig`` refuses the config instead of ignoring them."""


def register(name: str, *, loss: str = "ppo", uses_steps: bool = False, uses_reference: bool = False,
             needs_group: bool = False, keys: tuple[str, ...] = (), normalize_std: bool | None = None,
             summary: str = "", source: str = "", step_value: str | None = None, local_term: bool = False):
    """Decorator: add an estimator under ``name`` (names are unique)."""

    def wrap(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        unknown = set(keys) - set(ESTIMATOR_KEYS)
        if unknown:
            raise ValueError(f"estimator {name!r}: keys {sorted(unknown)} are not in ESTIMATOR_KEYS")
        ESTIMATORS[name] = Estimator(name, fn, loss, uses_steps, uses_reference, needs_group, keys, normalize_std,
                                     summary, source, step_value, local_term)
        return fn

    return wrap


def readers_of(key: str) -> tuple[str, ...]:
    """The registered estimators that read ``key`` (one of :data:`ESTIMATOR_KEYS`), in registration order."""
    return tuple(e.name for e in ESTIMATORS.values() if key in e.keys)


def get_estimator(name: str) -> Estimator:
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"estimator: unknown {name!r}; registered: {', '.join(sorted(ESTIMATORS))}") from None


def estimator_names() -> tuple[str, ...]:
    """The registered estimators' names, in registration order."""
    return tuple(ESTIMATORS)


def group_size_error(estimator: str, n_samples: int) -> str | None:
    """Why ``n_samples`` responses per prompt are too few for the estimator's group baseline; None when enough."""
    if get_estimator(estimator).needs_group and n_samples < 2:
        return (f"{estimator} needs a group of at least 2 responses per prompt for its baseline (a group of one "
                "gets A = R); set n_samples >= 2")
    return None


def _broadcast(adv: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.where(mask, adv.to(dtype).unsqueeze(1), 0.0).to(dtype)


def _check_batch(rewards, logp_old, logp_ref, mask) -> None:
    """The checks prl_advantages makes, for the estimators that do not read the log-probs."""
    require_rollout_batch(rewards, logp_old, logp_ref, mask)


@register("grpo", needs_group=True, summary="group outcome advantage (std-normalised) on every response token",
          source="Shao et al. 2024 (DeepSeekMath); the baseline of arXiv 2601.10201 v1 and v2")
def grpo(rewards, group_ids, logp_old, logp_ref, mask, *, cfg: AlgorithmConfig, boundaries=None):
    """GRPO: group outcome advantage (std-normalised) on every response token."""
    _check_batch(rewards, logp_old, logp_ref, mask)
    adv = group_advantages(rewards, group_ids, normalize_std=True, eps=cfg.eps)
    return _broadcast(adv, mask, logp_old.dtype)


@register("dr_grpo", needs_group=True, normalize_std=False, summary="group-centred reward, no std division",
          source="Liu et al. 2025 (Dr. GRPO)")
def dr_grpo(rewards, group_ids, logp_old, logp_ref, mask, *, cfg: AlgorithmConfig, boundaries=None):
    """Dr.GRPO: group-centred reward, no std division."""
    _check_batch(rewards, logp_old, logp_ref, mask)
    adv = group_advantages(rewards, group_ids, normalize_std=False, eps=cfg.eps)
    return _broadcast(adv, mask, logp_old.dtype)


@register("prl", uses_steps=True, uses_reference=True, needs_group=True, keys=("eta", "step_split", "order", "divergence"),
          summary="rho = A - S/eta filled over step segments, the value at each step's last token (or process first)",
          source="arXiv 2601.10201 v1 (PRL), Eq. 3.1 and its step-level form; Table 5's two orders", step_value="end",
          local_term=True)
def prl(rewards, group_ids, logp_old, logp_ref, mask, *, cfg: AlgorithmConfig, boundaries=None):
    """PRL: ρ = A − S/η (or process-first), filled over step segments.

    Without explicit ``boundaries`` the config's ``step_split`` string is used (``token`` and
    ``fixed:N`` need nothing else; ``text:`` splits need boundaries from the token texts).
    """
    return prl_advantages(
        rewards, group_ids, logp_old, logp_ref, mask,
        eta=cfg.eta, boundaries=boundaries if boundaries is not None else cfg.step_split, order=cfg.order,
        normalize_std=bool(cfg.normalize_std), eps=cfg.eps, divergence=cfg.divergence or DEFAULT_DIVERGENCE,
    )


@register("frpo", uses_steps=True, uses_reference=True, needs_group=True, keys=("eta", "step_split", "divergence"),
          summary="rho = A - (1/eta) x the future return-to-go of f(u), added after advantage construction; "
                  "the divergence's local term in the loss",
          source="arXiv 2601.10201 v2 (FRPO: future-KL regularised GRPO, token-wise f-divergences)", step_value="start",
          local_term=True)
def frpo(rewards, group_ids, logp_old, logp_ref, mask, *, cfg: AlgorithmConfig, boundaries=None):
    """FRPO: ρ_{i,t} = A_i − (1/η) Σ_{j≥t} f(u_{i,j}) at token level (the default split), after advantage
    construction; with a step split, every token of a step carries the return-to-go from the step's first token
    (``step_value='start'``: the same expected gradient as token level). The loss adds the divergence's local term
    (:func:`prl_core.divergences.local_term`) where it is not zero in expectation."""
    return prl_advantages(
        rewards, group_ids, logp_old, logp_ref, mask,
        eta=cfg.eta, boundaries=boundaries if boundaries is not None else cfg.step_split, order="advantage_first",
        normalize_std=bool(cfg.normalize_std), eps=cfg.eps, divergence=cfg.divergence or DEFAULT_DIVERGENCE,
        step_value="start",
    )


@register("grpo_fused_kl", uses_reference=True, needs_group=True, keys=("eta", "divergence"),
          summary="the regulariser fused into the reward before group normalisation: R' = R - (1/eta) sum_t f(u_t); "
                  "no loss-side term (as verl's use_kl_in_reward)",
          source="the reward-side KL of arXiv 2601.10201 v2's comparison (the variant it argues against); "
                 "verl's use_kl_in_reward")
def grpo_fused_kl(rewards, group_ids, logp_old, logp_ref, mask, *, cfg: AlgorithmConfig, boundaries=None):
    """GRPO on R'_i = R_i − (1/η) Σ_t f(u_{i,t}): the KL fused into the reward before the group normalisation."""
    return fused_kl_advantages(rewards, group_ids, logp_old, logp_ref, mask, eta=cfg.eta,
                               divergence=cfg.divergence or DEFAULT_DIVERGENCE, normalize_std=bool(cfg.normalize_std),
                               eps=cfg.eps)


@register("raft", loss="sft", summary="weight 1 on the tokens of correct responses, fine-tuned with SFT",
          source="Dong et al. 2023 (RAFT); a baseline of arXiv 2601.10201 v1")
def raft(rewards, group_ids, logp_old, logp_ref, mask, *, cfg: AlgorithmConfig, boundaries=None):
    """RAFT: weight 1 on the tokens of correct responses, 0 elsewhere (fine-tuned with SFT)."""
    _check_batch(rewards, logp_old, logp_ref, mask)
    keep = raft_select(rewards, group_ids, threshold=cfg.raft_threshold)
    return _broadcast(keep.to(logp_old.dtype), mask, logp_old.dtype)


def compute_advantages(
    cfg: AlgorithmConfig,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    mask: torch.Tensor,
    boundaries: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run the estimator that ``cfg.estimator`` names; (B, T) weights."""
    est = get_estimator(cfg.estimator)
    if boundaries is not None and not est.uses_steps:
        raise ValueError(f"boundaries: the {cfg.estimator!r} estimator does not use step boundaries")
    return est.fn(rewards, group_ids, logp_old, logp_ref, mask, cfg=cfg, boundaries=boundaries)
