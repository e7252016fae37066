"""FRPO (arXiv 2601.10201 v2) proved by enumeration: on tabular autoregressive policies small enough to list every
response, the expected gradient of the training surrogate (the trainer's own estimator and loss, summed over every
group of n responses with its probability) equals the exact gradient of the regularised objective
J = U_n(p) − n/η · D_f (autograd over the enumerated objective, tests/enumeration.py) within 1e-10, for every
divergence, for GRPO's group normalisation and Dr.GRPO's centring, at token level and with step boundaries.

The same enumeration measures, as numbers, what does *not* give that gradient: a loss-side local penalty (today's
``kl_loss_coef`` with k1 or k3), PRL v1's value at the end of a step, the KL fused into the reward before the std
normalisation, and PRL's process-first order (docs/architecture.md §The f-divergence family)."""

from __future__ import annotations

import math

import pytest
import torch

from prl_core import AlgorithmConfig

from enumeration import DT, Tabular, expected_surrogate_grad, grad, objective, regulariser, regulariser_by_positions, utility

DIVERGENCES = ("reverse_kl", "forward_kl", "chi2", "js")
ETA = 2.5
POLICIES = {  # (vocab, length, eos, n): |responses|^n groups
    "v2-L3-n3": (2, 3, False, 3),
    "v2-L2-n4": (2, 2, False, 4),  # n >= 4: the group utility U_n is no longer linear in p
    "v3-L2-n2": (3, 2, False, 2),
    "v4-L2-n2": (4, 2, False, 2),
    "v3-L3-eos-n2": (3, 3, True, 2),
}


def _case(name: str, seed: int = 0):
    vocab, length, eos, n = POLICIES[name]
    pol = Tabular.build(vocab, length, eos=eos, seed=seed)
    return pol, pol.logits(seed + 10), pol.logits(seed + 20), n


def _norm(pol: Tabular, n: int) -> float | None:
    """Fixed-length responses: the loss's own token-mean (a constant n·L). Variable lengths: a constant normaliser
    (as the trainer's token budget gives), since a token count that depends on the sample biases any estimator."""
    return None if not pol.eos else float(n * pol.length)


def _target(pol, theta, ref, n, divergence, *, normalize_std: bool, eta: float = ETA) -> torch.Tensor:
    """−∇J / N: the exact gradient of the loss the surrogate should have in expectation."""
    N = n * pol.length
    return -grad(lambda x: objective(pol, x, ref, n, eta, divergence, normalize_std=normalize_std), theta) / N


def _reg_part(pol, theta, ref, n, divergence, eta: float = ETA) -> torch.Tensor:
    """The regulariser's share of the target, n/η · ∇D_f / N (what the gaps below are measured against)."""
    return n / eta * grad(lambda x: regulariser(pol, x, ref, divergence), theta) / (n * pol.length)


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_the_token_wise_f_is_the_divergence_it_is_named_after(divergence):
    pol, theta, ref, _ = _case("v3-L3-eos-n2")
    a = regulariser(pol, theta, ref, divergence)
    b = regulariser_by_positions(pol, theta, ref, divergence)
    assert float(a) > 0 and abs(float(a - b)) < 1e-12
    if divergence == "reverse_kl":  # token-wise reverse KL is the sequence KL
        lp, lr = pol.seq_logp(theta), pol.seq_logp(ref)
        assert abs(float((lp.exp() * (lp - lr)).sum() - a)) < 1e-12


def test_the_group_utility_is_two_arcsin_root_p_for_large_groups_and_linear_without_the_std():
    p = torch.tensor(0.3, dtype=DT)
    assert abs(float(utility(p, 6, normalize_std=False)) - 5 * 0.3) < 1e-14  # Dr.GRPO: (n − 1)·p
    limit = 2 * math.asin(math.sqrt(0.3))
    gaps = [limit - float(utility(p, n, normalize_std=True, eps=0.0)) / n for n in (400, 1600, 6400)]
    assert 0 < gaps[2] < gaps[1] < gaps[0] and gaps[2] < 0.03
    for a, b in zip(gaps, gaps[1:]):  # the sum's deficit near p = 0 shrinks as 1/√n
        assert abs(a / b - 2.0) < 0.1


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("divergence", DIVERGENCES)
@pytest.mark.parametrize("normalize_std", [True, False], ids=["grpo-norm", "dr-centring"])
def test_frpo_expected_gradient_is_the_exact_gradient_at_token_level(policy, divergence, normalize_std):
    pol, theta, ref, n = _case(policy)
    cfg = AlgorithmConfig(estimator="frpo", eta=ETA, divergence=divergence, normalize_std=normalize_std, n_samples=n)
    got = expected_surrogate_grad(pol, theta, ref, cfg, n, norm=_norm(pol, n))
    want = _target(pol, theta, ref, n, divergence, normalize_std=normalize_std)
    assert float(want.abs().max()) > 1e-3  # a gradient worth comparing
    assert float((got - want).abs().max()) < 1e-10


@pytest.mark.parametrize("divergence", DIVERGENCES)
@pytest.mark.parametrize("normalize_std", [True, False], ids=["grpo-norm", "dr-centring"])
@pytest.mark.parametrize("split", ["fixed:2", "fixed:3"])
def test_frpo_with_step_boundaries_keeps_the_exact_gradient(divergence, normalize_std, split):
    pol, theta, ref, n = _case("v2-L3-n3")
    cfg = AlgorithmConfig(estimator="frpo", eta=ETA, divergence=divergence, normalize_std=normalize_std, n_samples=n,
                          step_split=split)
    got = expected_surrogate_grad(pol, theta, ref, cfg, n)
    want = _target(pol, theta, ref, n, divergence, normalize_std=normalize_std)
    assert float((got - want).abs().max()) < 1e-10


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_prl_at_token_level_is_frpo_bit_for_bit(divergence):
    """v1's token-level PRL and v2's FRPO are one estimator: the same ρ and the same loss."""
    pol, theta, ref, n = _case("v3-L2-n2")
    a = AlgorithmConfig(estimator="prl", eta=ETA, divergence=divergence, n_samples=n)
    b = AlgorithmConfig(estimator="frpo", eta=ETA, divergence=divergence, n_samples=n)
    assert torch.equal(expected_surrogate_grad(pol, theta, ref, a, n), expected_surrogate_grad(pol, theta, ref, b, n))


def _gap(got: torch.Tensor, want: torch.Tensor, reg: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(reg))


@pytest.mark.parametrize("kl_estimator, at_least", [("k1", 0.999), ("k3", 0.05)])
def test_a_loss_side_kl_penalty_does_not_give_the_regularised_gradient(kl_estimator, at_least, capsys):
    """GRPO + kl_loss_coef·k (the loss-side KL of the baselines, at the same coefficient 1/η on the same token mean)
    against the exact gradient of U_n − n/η·KL: the gap is a share of the regulariser's own gradient. k1's on-policy
    gradient is E[Σ∇log π] = 0, so it misses all of it (gap 1); k3's is each position's local term only."""
    pol, theta, ref, n = _case("v2-L3-n3")
    cfg = AlgorithmConfig(estimator="grpo", n_samples=n, kl_loss_coef=1 / ETA, kl_estimator=kl_estimator)
    got = expected_surrogate_grad(pol, theta, ref, cfg, n)
    want = _target(pol, theta, ref, n, "reverse_kl", normalize_std=True)
    gap = _gap(got, want, _reg_part(pol, theta, ref, n, "reverse_kl"))
    with capsys.disabled():
        print(f"\n[frpo-exact] loss-side {kl_estimator}: gradient gap {gap:.4f} of the regulariser's gradient")
    assert gap > at_least
    if kl_estimator == "k1":
        assert abs(gap - 1.0) < 1e-9
    frpo = AlgorithmConfig(estimator="frpo", eta=ETA, n_samples=n)
    assert float((expected_surrogate_grad(pol, theta, ref, frpo, n) - want).abs().max()) < 1e-10


def test_prl_v1_step_end_values_are_a_biased_gradient_and_process_first_too(capsys):
    pol, theta, ref, n = _case("v2-L3-n3")
    want = _target(pol, theta, ref, n, "reverse_kl", normalize_std=True)
    reg = _reg_part(pol, theta, ref, n, "reverse_kl")
    gaps = {}
    for label, kw in (("step end, fixed:2", dict(step_split="fixed:2")),
                      ("process first, token", dict(order="process_first"))):
        cfg = AlgorithmConfig(estimator="prl", eta=ETA, n_samples=n, **kw)
        gaps[label] = _gap(expected_surrogate_grad(pol, theta, ref, cfg, n), want, reg)
    with capsys.disabled():
        print("\n[frpo-exact] " + "; ".join(f"prl {k}: gap {v:.4f}" for k, v in gaps.items()))
    assert all(v > 0.01 for v in gaps.values())


def test_the_kl_fused_into_the_reward_is_exact_only_without_the_std_division(capsys):
    """v2's point: with group normalisation the fused reward's expected gradient is not the gradient of U_n − c·KL
    for any c (least-squares c, residual measured); with Dr.GRPO's centring it is exactly (n − 1)·∇(p − KL/η)."""
    pol, theta, ref, n = _case("v2-L3-n3")
    N = n * pol.length
    dr = AlgorithmConfig(estimator="grpo_fused_kl", eta=ETA, n_samples=n, normalize_std=False)
    got = expected_surrogate_grad(pol, theta, ref, dr, n)
    p_minus_kl = lambda x: ((torch.exp(pol.seq_logp(x)) * pol.reward).sum()
                            - regulariser(pol, x, ref, "reverse_kl") / ETA)
    want = -(n - 1) * grad(p_minus_kl, theta) / N
    assert float((got - want).abs().max()) < 1e-10

    norm_cfg = AlgorithmConfig(estimator="grpo_fused_kl", eta=ETA, n_samples=n)
    got = expected_surrogate_grad(pol, theta, ref, norm_cfg, n).reshape(-1)
    u = -grad(lambda x: utility((torch.exp(pol.seq_logp(x)) * pol.reward).sum(), n, normalize_std=True), theta) / N
    d = n * grad(lambda x: regulariser(pol, x, ref, "reverse_kl"), theta) / N
    u, d = u.reshape(-1), d.reshape(-1)
    c = float(torch.dot(got - u, d) / torch.dot(d, d))  # best coefficient of the KL part
    residual = float(torch.linalg.vector_norm(got - u - c * d) / torch.linalg.vector_norm(c * d))
    with capsys.disabled():
        print(f"\n[frpo-exact] fused KL with the std division: best coefficient {c:.4f} (1/eta = {1 / ETA}), "
              f"residual {residual:.4f} of the KL part")
    assert residual > 0.01
