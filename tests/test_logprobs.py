"""Chunked log-probs and entropy (prl_core.logprobs) against the full-logits computation they replace."""

from __future__ import annotations

import pytest
import torch

from prl_core.logprobs import token_logprobs
from prl_core.losses import aggregate, ppo_clip_loss, token_entropy


def _case(n=37, h=16, v=101, seed=0):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(h, v, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(v, h, generator=g))
    hidden = torch.randn(n, h, generator=g, requires_grad=True)
    targets = torch.randint(0, v, (n,), generator=g)
    return head, hidden, targets


@pytest.mark.parametrize("chunk", [1, 5, 37, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunks_give_the_full_logits_values_and_gradients(chunk, temperature):
    head, hidden, targets = _case()
    full = head(hidden).float() / temperature
    ref_lp = torch.log_softmax(full, -1).gather(-1, targets[:, None]).squeeze(-1)
    ref_ent = token_entropy(full.detach()[None])[0]
    ref_lp.sum().backward()
    ref_gh, ref_gw = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None

    lp, ent = token_logprobs(hidden, head.weight, targets, chunk_tokens=chunk, temperature=temperature, entropy=True)
    assert lp.dtype == torch.float32 and lp.shape == (37,)
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    assert not ent.requires_grad
    lp.sum().backward()
    torch.testing.assert_close(hidden.grad, ref_gh, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(head.weight.grad, ref_gw, atol=1e-5, rtol=1e-5)


def test_a_bias_and_bf16_weights_follow_the_plain_computation():
    head, hidden, targets = _case(seed=1)
    bias = torch.randn(101, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).requires_grad_(True)
    w = head.weight.detach().to(torch.bfloat16).requires_grad_(True)
    h = hidden.detach().to(torch.bfloat16).requires_grad_(True)
    # the same bf16 values in fp32 arithmetic: what the bf16 results must approach
    h32, w32, b32 = (x.detach().float().requires_grad_(True) for x in (h, w, bias))
    ref = torch.log_softmax(torch.nn.functional.linear(h32, w32, b32), -1).gather(-1, targets[:, None]).squeeze(-1)
    (ref * torch.arange(37)).sum().backward()
    lp, _ = token_logprobs(h, w, targets, bias=bias, chunk_tokens=6)
    torch.testing.assert_close(lp, ref.detach(), atol=5e-2, rtol=1e-2)  # bf16 logits, as the model computes them
    (lp * torch.arange(37)).sum().backward()
    for got, want in zip((h.grad, w.grad, bias.grad), (h32.grad, w32.grad, b32.grad)):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want, atol=2e-2 * float(want.abs().max()), rtol=2e-2)


def test_bad_arguments_name_themselves():
    head, hidden, targets = _case()
    with pytest.raises(ValueError, match="chunk_tokens"):
        token_logprobs(hidden, head.weight, targets, chunk_tokens=0)
    with pytest.raises(ValueError, match="targets"):
        token_logprobs(hidden, head.weight, targets[:-1])
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(hidden, head.weight, targets, temperature=0.0)
    with pytest.raises(ValueError, match="weight"):
        token_logprobs(hidden, head.weight[:, :-1], targets)
    lp, ent = token_logprobs(hidden[:0], head.weight, targets[:0], entropy=True)
    assert lp.shape == (0,) and ent.shape == (0,)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batch_aggregates_with_the_mini_batch_norm_sum_to_the_whole(agg):
    g = torch.Generator().manual_seed(3)
    losses = torch.randn(6, 9, generator=g)
    mask = torch.rand(6, 9, generator=g) > 0.3
    mask[2] = False  # a response without tokens counts in neither aggregate
    whole = aggregate(losses, mask, agg)
    norm = float(mask.sum()) if agg == "token-mean" else float((mask.sum(1) > 0).sum())
    for split in ([2, 4], [1, 1, 4], [6]):
        parts = torch.split(torch.arange(6), split)
        total = sum(aggregate(losses[p], mask[p], agg, norm=norm) for p in parts)
        torch.testing.assert_close(total, whole)


def test_ppo_loss_takes_precomputed_entropy_as_its_metric():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 5, 11, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    logp = torch.log_softmax(logits, -1)[..., 0]
    adv = torch.randn(3, 5, generator=g)
    _, m1 = ppo_clip_loss(logp, logp.detach(), adv, mask, logits=logits)
    _, m2 = ppo_clip_loss(logp, logp.detach(), adv, mask, entropy=token_entropy(logits))
    torch.testing.assert_close(m1["actor/entropy"], m2["actor/entropy"])
    with pytest.raises(ValueError, match="one of them"):
        ppo_clip_loss(logp, logp.detach(), adv, mask, logits=logits, entropy=token_entropy(logits))
