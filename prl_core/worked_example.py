"""The four-path example of docs/architecture.md §The worked example, computed with prl_core from its
definitions (no I/O).

Two binary choices give paths 00, 01, 10, 11; the reference picks each bit with probability
1/2; only 11 earns reward 1; η = 1. The KL-regularised optimum is π*(a) ∝ π_ref(a)·e^{η R(a)}.
Under π* every path has the same net value R − (1/η)·Σ log(π*/π_ref) = C = log Z / η, and both
continuations of the prefix "1" have the same value V after their future log-ratio. Under the
reference policy itself the log-ratios vanish and the two continuations read 0 and 1.
"""

from __future__ import annotations

import math

import torch

from .advantages import prl_advantages

PATHS = ("00", "01", "10", "11")


def optimal_policy(eta: float = 1.0) -> dict[str, float]:
    """π*(path) ∝ π_ref(path)·exp(η·R(path)) with π_ref = 1/4 each and R = 1 only for '11'."""
    weights = {p: 0.25 * math.exp(eta * (1.0 if p == "11" else 0.0)) for p in PATHS}
    z = sum(weights.values())
    return {p: w / z for p, w in weights.items()}


def token_logprobs(policy: dict[str, float]) -> torch.Tensor:
    """(4, 2) float64 per-token log-probs log π(a_1), log π(a_2 | a_1) of each path under ``policy``."""
    first = {b: sum(p for path, p in policy.items() if path[0] == b) for b in "01"}
    rows = [[math.log(first[path[0]]), math.log(policy[path] / first[path[0]])] for path in PATHS]
    return torch.tensor(rows, dtype=torch.float64)


def compute(eta: float = 1.0) -> dict[str, float]:
    """Every number of the worked example, the PRL ones through :func:`prl_advantages`.

    Each path is its own group (a group of one has no baseline, so A = R) and the split is
    token level, so ρ_t = R − Σ_{j≥t} k_j / η with k = log π_old − log π_ref.
    """
    pi_star = optimal_policy(eta)
    z = 0.75 + 0.25 * math.exp(eta)
    rewards = torch.tensor([1.0 if p == "11" else 0.0 for p in PATHS], dtype=torch.float64)
    groups = torch.arange(4)
    mask = torch.ones(4, 2, dtype=torch.bool)
    logp_ref = torch.full((4, 2), math.log(0.5), dtype=torch.float64)

    rho_opt = prl_advantages(rewards, groups, token_logprobs(pi_star), logp_ref, mask, eta=eta)
    rho_ref = prl_advantages(rewards, groups, logp_ref.clone(), logp_ref, mask, eta=eta)
    i10, i11 = PATHS.index("10"), PATHS.index("11")
    return {
        "p_11": pi_star["11"],
        "p_other": pi_star["00"],
        "C_closed_form": math.log(z) / eta,
        **{f"C_from_rho[{p}]": float(rho_opt[i, 0]) for i, p in enumerate(PATHS)},
        "V_prefix1[10]": float(rho_opt[i10, 1]),
        "V_prefix1[11]": float(rho_opt[i11, 1]),
        "V_prefix1_under_reference[10]": float(rho_ref[i10, 1]),
        "V_prefix1_under_reference[11]": float(rho_ref[i11, 1]),
    }


# The values docs/architecture.md §The worked example states, to 6 decimals.
DOCUMENTED = {
    "p_11": 0.475367,
    "p_other": 0.174878,
    "C_closed_form": 0.357374,
    **{f"C_from_rho[{p}]": 0.357374 for p in PATHS},
    "V_prefix1[10]": 0.620115,
    "V_prefix1[11]": 0.620115,
    "V_prefix1_under_reference[10]": 0.0,
    "V_prefix1_under_reference[11]": 1.0,
}
