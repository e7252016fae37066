"""Token-wise f-divergences: the regulariser family of FRPO (docs/architecture.md §The f-divergence family).

For a sampled token y_t with policy log-prob ``logp`` = log π(y_t|·) and reference log-prob ``logp_ref`` =
log π_ref(y_t|·), the sampled-token ratio is u_t = π_ref(y_t|·) / π(y_t|·). A divergence is a convex f with
f(1) = 0; its token-wise regulariser is D_f(θ) = E_{y∼π}[Σ_t f(u_t)], the per-position f-divergence
D_f(π_ref(·|y<t) ‖ π(·|y<t)) = E_{a∼π}[f(π_ref(a)/π(a))] summed over the positions the policy reaches.

Its on-policy gradient has two parts (derived in docs/architecture.md §The f-divergence family):

* the **future return-to-go** Σ_{j≥t} f(u_j) on the score ∇log π(y_t), which the estimators put into ρ
  (:func:`prl_core.advantages.prl_advantages` with ``divergence``);
* the **local (pathwise) term** Σ_t ∇f(u_t) = Σ_t −u_t f'(u_t) ∇log π(y_t), which the loss carries
  (:func:`local_term`). For reverse KL −u f'(u) = 1, so the term is E[∇log π] = 0 in expectation and is
  left out (``Divergence.local_zero_mean``): reverse KL is the PRL of arXiv 2601.10201v1, bit for bit.

Shapes: (B, T) float tensors; nothing here reads a mask except :func:`local_term`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ._checks import require_choice, require_float

LOG_U_CLAMP = 20.0
"""|log u| is clamped before exp (as :data:`prl_core.losses.LOG_RATIO_CLAMP`), so f(u) never overflows."""


def _reverse_kl(d: torch.Tensor) -> torch.Tensor:  # f(u) = −log u
    return -d


def _forward_kl(d: torch.Tensor) -> torch.Tensor:  # f(u) = u log u
    return d * torch.exp(d)


def _chi2(d: torch.Tensor) -> torch.Tensor:  # f(u) = (u − 1)²
    return torch.expm1(d).square()


def _js(d: torch.Tensor) -> torch.Tensor:  # f(u) = ½[u log u − (1 + u) log((1 + u)/2)]
    u = torch.exp(d)
    return 0.5 * (u * d - (1.0 + u) * (torch.nn.functional.softplus(d) - math.log(2.0)))


@dataclass(frozen=True)
class Divergence:
    """One member of the family: f as a function of d = log u (so that it can be computed stably)."""

    name: str
    f_of_log_u: Callable[[torch.Tensor], torch.Tensor]
    local_zero_mean: bool
    """Whether the local term E_π[Σ_t ∇f(u_t)] is 0 on policy (then the loss leaves it out)."""
    reads: str
    """What D_f(π_ref ‖ π) per position is, in words (``prl train`` and the docs show it)."""


DIVERGENCES: dict[str, Divergence] = {d.name: d for d in (
    Divergence("reverse_kl", _reverse_kl, True, "KL(π ‖ π_ref): f(u) = −log u (PRL v1, FRPO's default)"),
    Divergence("forward_kl", _forward_kl, False, "KL(π_ref ‖ π): f(u) = u log u"),
    Divergence("chi2", _chi2, False, "Pearson χ²(π_ref ‖ π) = E_π[(u − 1)²]: f(u) = (u − 1)²"),
    Divergence("js", _js, False, "Jensen–Shannon JS(π_ref, π): f(u) = ½[u log u − (1 + u) log((1 + u)/2)]"),
)}
"""The divergences, by their ``algorithm.divergence`` names; ``reverse_kl`` is the default everywhere."""

DEFAULT_DIVERGENCE = "reverse_kl"


def get_divergence(name: str) -> Divergence:
    return DIVERGENCES[require_choice("divergence", name, tuple(DIVERGENCES))]


def token_values(logp: torch.Tensor, logp_ref: torch.Tensor, divergence: str) -> torch.Tensor:
    """f(u_t) per token, u_t = exp(logp_ref − logp), (B, T) → (B, T) in the inputs' (promoted) dtype.

    For ``reverse_kl`` this is exactly ``logp − logp_ref`` (the log-ratio k_t of PRL). Gradient flows through
    whichever input carries one (:func:`local_term` differentiates it through ``logp``).
    """
    logp = require_float("logp", logp, allow_nan=True)
    logp_ref = require_float("logp_ref", logp_ref, tuple(logp.shape), allow_nan=True)
    div = get_divergence(divergence)
    if div.name == "reverse_kl":
        return logp - logp_ref
    return div.f_of_log_u(torch.clamp(logp_ref - logp, -LOG_U_CLAMP, LOG_U_CLAMP))


def local_term(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor, divergence: str) -> torch.Tensor | None:
    """The divergence's local (pathwise) term per token, f(u_t(θ)) with gradient through ``logp``; (B, T), zero
    outside ``mask``. None where it is zero in expectation on policy (reverse KL): the loss then has no such term.

    Added to the loss with the regulariser's coefficient 1/η and the policy loss's own aggregation, its
    gradient is the Σ_t ∇f(u_t) half of ∇D_f (the other half is the return-to-go in ρ).
    """
    if get_divergence(divergence).local_zero_mean:
        return None
    values = token_values(logp, logp_ref.detach(), divergence)
    return torch.where(mask, values, 0.0)
