"""Tabular autoregressive policies small enough to enumerate every response, and the regularised objective of
arXiv 2601.10201 v2 computed from its definitions (independently of prl_core's estimators), for the exactness
tests (tests/test_frpo_exact.py, tests/test_offpolicy.py) and bench/frpo_exact.py.

A policy has one free logit vector per prefix. Responses are every token string of exactly ``length`` tokens,
or, with ``eos``, the strings that end at the first token 0 (EOS) or at ``length``. Rewards are binary.

The objective of one prompt, for n responses per group, regulariser coefficient β = 1/η and divergence f:

    J(θ) = U_n(p_θ) − n β D_f(θ),   p_θ = P_{y∼π_θ}(R(y) = 1),   D_f(θ) = E_{y∼π_θ}[Σ_t f(π_ref(y_t|·)/π_θ(y_t|·))]

where U_n(p) = E_{K∼Bin(n, p)}[h_n(K)] is the prompt-level utility that GRPO's group normalisation induces for
binary rewards: h_n(0) = 0 and h_n(k+1) − h_n(k) = a(k+1) − b(k), with a(K) and b(K) the advantage of a correct
and of a wrong response in a group with K correct (0 when the group is all equal). With the std division
U_n(p)/n → 2·arcsin√p as n → ∞; with Dr.GRPO's centring U_n(p) = (n − 1)·p.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

DT = torch.float64

F = {  # f(u), u = π_ref/π, written here from the definitions (not imported from prl_core)
    "reverse_kl": lambda u: -torch.log(u),
    "forward_kl": lambda u: u * torch.log(u),
    "chi2": lambda u: (u - 1.0) ** 2,
    "js": lambda u: 0.5 * (u * torch.log(u) - (1.0 + u) * torch.log((1.0 + u) / 2.0)),
}


def categorical_divergence(name: str, pi: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """D_f(π_ref ‖ π) between categorical distributions (last dimension), by each divergence's textbook formula."""
    if name == "reverse_kl":
        return (pi * (pi.log() - ref.log())).sum(-1)
    if name == "forward_kl":
        return (ref * (ref.log() - pi.log())).sum(-1)
    if name == "chi2":
        return ((ref - pi) ** 2 / pi).sum(-1)
    m = 0.5 * (pi + ref)
    return 0.5 * (ref * (ref / m).log()).sum(-1) + 0.5 * (pi * (pi / m).log()).sum(-1)


@dataclass
class Tabular:
    """Every response of a tabular policy: ``tokens``, ``prefix`` (index of each token's prefix) and ``mask``,
    all (S, L); ``reward`` (S,) binary."""

    vocab: int
    length: int
    eos: bool
    tokens: torch.Tensor
    prefix: torch.Tensor
    mask: torch.Tensor
    reward: torch.Tensor
    n_prefixes: int

    @classmethod
    def build(cls, vocab: int, length: int, *, eos: bool = False, seed: int = 0) -> "Tabular":
        seqs: list[tuple[int, ...]] = []

        def grow(prefix: tuple[int, ...]) -> None:
            if len(prefix) == length or (eos and prefix and prefix[-1] == 0):
                seqs.append(prefix)
                return
            for a in range(vocab):
                grow(prefix + (a,))

        grow(())
        prefixes = sorted({s[:t] for s in seqs for t in range(len(s))}, key=lambda p: (len(p), p))
        index = {p: i for i, p in enumerate(prefixes)}
        S = len(seqs)
        tokens = torch.zeros(S, length, dtype=torch.long)
        prefix = torch.zeros(S, length, dtype=torch.long)
        mask = torch.zeros(S, length, dtype=torch.bool)
        for i, s in enumerate(seqs):
            for t, a in enumerate(s):
                tokens[i, t], prefix[i, t], mask[i, t] = a, index[s[:t]], True
        gen = torch.Generator().manual_seed(seed)
        reward = (torch.rand(S, generator=gen) < 0.45).to(DT)
        reward[0], reward[-1] = 1.0, 0.0  # some correct and some wrong responses: 0 < p < 1
        return cls(vocab, length, eos, tokens, prefix, mask, reward, len(prefixes))

    def logits(self, seed: int, scale: float = 1.0) -> torch.Tensor:
        """(P, V) random logits: a policy or a reference."""
        gen = torch.Generator().manual_seed(seed)
        return scale * torch.randn(self.n_prefixes, self.vocab, generator=gen, dtype=DT)

    def token_logp(self, logits: torch.Tensor) -> torch.Tensor:
        """(S, L) log-prob of each response token (0 outside the mask), differentiable in ``logits``."""
        table = torch.log_softmax(logits, -1)
        return torch.where(self.mask, table[self.prefix, self.tokens], 0.0)

    def seq_logp(self, logits: torch.Tensor) -> torch.Tensor:
        return self.token_logp(logits).sum(-1)

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    def groups(self, n: int) -> torch.Tensor:
        """(G, n) every ordered group of n responses (indices), G = S^n."""
        return torch.tensor(list(itertools.product(range(self.size), repeat=n)), dtype=torch.long)


# ─── the objective, from its definitions ────────────────────────────────────────────────────────────────

def advantage_of(K: int, n: int, correct: bool, *, normalize_std: bool, eps: float = 1e-6) -> float:
    """The GRPO / Dr.GRPO advantage of one response in a group of n binary rewards with K correct (definition:
    (R − mean) / (unbiased std + eps), or R − mean; 0 in a group whose rewards are all equal)."""
    if K in (0, n):
        return 0.0
    mean = K / n
    centred = (1.0 if correct else 0.0) - mean
    if not normalize_std:
        return centred
    std = math.sqrt(K * (n - K) / (n * (n - 1)))
    return centred / (std + eps)


def utility_steps(n: int, *, normalize_std: bool, eps: float = 1e-6) -> list[float]:
    """h_n(0..n): the prompt-level utility of the group advantage, h(k+1) − h(k) = a(k+1) − b(k)."""
    h = [0.0]
    for k in range(n):
        h.append(h[-1] + advantage_of(k + 1, n, True, normalize_std=normalize_std, eps=eps)
                 - advantage_of(k, n, False, normalize_std=normalize_std, eps=eps))
    return h


def utility(p: torch.Tensor, n: int, *, normalize_std: bool, eps: float = 1e-6) -> torch.Tensor:
    """U_n(p) = E_{K∼Bin(n,p)}[h_n(K)], differentiable in p."""
    h = utility_steps(n, normalize_std=normalize_std, eps=eps)
    K = torch.arange(n + 1, dtype=DT)
    log_comb = torch.lgamma(torch.tensor(n + 1.0, dtype=DT)) - torch.lgamma(K + 1) - torch.lgamma(n - K + 1)
    pmf = torch.exp(log_comb + K * torch.log(p) + (n - K) * torch.log1p(-p))
    return (pmf * torch.tensor(h, dtype=DT)).sum()


def regulariser(policy: Tabular, logits: torch.Tensor, ref_logits: torch.Tensor, divergence: str) -> torch.Tensor:
    """D_f(θ) = Σ_y π_θ(y) Σ_t f(u_t(y)), differentiable in ``logits``."""
    lp = policy.token_logp(logits)
    lr = policy.token_logp(ref_logits)
    u = torch.exp(torch.where(policy.mask, lr - lp, 0.0))
    per_token = torch.where(policy.mask, F[divergence](u), 0.0)
    return (torch.exp(lp.sum(-1)) * per_token.sum(-1)).sum()


def regulariser_by_positions(policy: Tabular, logits: torch.Tensor, ref_logits: torch.Tensor,
                             divergence: str) -> torch.Tensor:
    """The same D_f as Σ over prefixes h of P_π(h) · D_f(π_ref(·|h) ‖ π(·|h)), from whole distributions: the
    check that the token-wise f is the divergence it is named after."""
    pi, ref = torch.softmax(logits, -1), torch.softmax(ref_logits, -1)
    per_prefix = categorical_divergence(divergence, pi, ref)
    lp = policy.token_logp(logits)
    reach = torch.zeros(policy.n_prefixes, dtype=DT)
    seen = torch.zeros(policy.n_prefixes, dtype=torch.bool)
    prob = torch.exp(lp.sum(-1))
    for s in range(policy.size):  # P(h) = Σ of the probabilities of the responses through h, counted once per response
        for t in range(policy.length):
            if policy.mask[s, t]:
                reach[policy.prefix[s, t]] = reach[policy.prefix[s, t]] + prob[s]
                seen[policy.prefix[s, t]] = True
    return (reach * per_prefix)[seen].sum()


def objective(policy: Tabular, logits: torch.Tensor, ref_logits: torch.Tensor, n: int, eta: float, divergence: str,
              *, normalize_std: bool, eps: float = 1e-6) -> torch.Tensor:
    """J(θ) = U_n(p_θ) − n/η · D_f(θ)."""
    p = (torch.exp(policy.seq_logp(logits)) * policy.reward).sum()
    return utility(p, n, normalize_std=normalize_std, eps=eps) - n / eta * regulariser(policy, logits, ref_logits,
                                                                                         divergence)


def grad(fn, logits: torch.Tensor) -> torch.Tensor:
    x = logits.detach().clone().requires_grad_(True)
    return torch.autograd.grad(fn(x), x)[0]


# ─── the training surrogate, in expectation over every group ──────────────────────────────────────────────

def expected_surrogate_grad(policy: Tabular, logits: torch.Tensor, ref_logits: torch.Tensor, cfg, n: int, *,
                            behavior_logits: torch.Tensor | None = None, correction: tuple[str, str, float] | None = None,
                            norm: float | None = None) -> torch.Tensor:
    """Σ_g P(g) ∇L_g at θ = ``logits``: every group g of n responses drawn from the behaviour policy (default: the
    policy itself), its ρ from :func:`prl_core.estimators.compute_advantages` with logp_old = the policy's log-probs,
    its loss from :func:`prl_core.objective.surrogate_loss` (the trainer's), optionally weighted by
    :func:`prl_core.offpolicy.rollout_is_weights` with ``correction`` = (mode, level, cap)."""
    from prl_core import compute_advantages
    from prl_core.objective import surrogate_loss
    from prl_core.offpolicy import rollout_is_weights

    groups = policy.groups(n)
    G = groups.shape[0]
    rows = groups.reshape(-1)
    theta = logits.detach().clone().requires_grad_(True)
    lp_all = policy.token_logp(theta)
    old_all = lp_all.detach()
    ref_all = policy.token_logp(ref_logits).detach()
    beh_all = policy.token_logp(behavior_logits).detach() if behavior_logits is not None else old_all
    mask = policy.mask[rows]
    rho = compute_advantages(cfg, policy.reward[rows], torch.arange(G).repeat_interleave(n), old_all[rows],
                             ref_all[rows], mask)
    p_group = torch.exp(beh_all.sum(-1))[groups].prod(-1)
    total = theta.new_zeros(())
    for g in range(G):
        idx = groups[g]
        sl = slice(g * n, (g + 1) * n)
        w = None
        if correction is not None:
            mode, level, cap = correction
            w, _ = rollout_is_weights(old_all[idx], beh_all[idx], policy.mask[idx], mode=mode, level=level, cap=cap)
        loss, _ = surrogate_loss(cfg, lp_all[idx], old_all[idx], ref_all[idx], rho[sl], policy.mask[idx], norm=norm,
                                 is_weights=w)
        total = total + p_group[g] * loss
    return torch.autograd.grad(total, theta)[0]
