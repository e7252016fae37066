"""Log-probabilities and entropy of sampled tokens from final hidden states, a chunk of tokens at a time.

The policy loss needs, per response token, log π(token) and (as a metric) the entropy of π at that
position. Computing them from the model's full logits materialises B × L × V values (and fp32 copies
of them): at the paper's scale (8 × 3,072 × 151,936) that is ≈ 15 GB per tensor. Here the LM head's
weight is applied to the response tokens' hidden states only, ``chunk_tokens`` rows at a time, and the
backward pass recomputes each chunk's logits instead of keeping them (the fused linear + log-softmax of
Liger-style kernels, in plain torch): at most one chunk's logits (chunk × V) exist at once, forward or
backward.

It is one autograd function over the whole (N, H) input and the head's weight, so a ZeRO-3 trainer that
calls it through the head module gathers the weight once per pass, whatever N is on each rank.

Shapes: N tokens, H hidden size, V vocabulary.
"""

from __future__ import annotations

import torch

from ._checks import require_float, require_tensor


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """(n, V) fp32 logits of one chunk (computed in the weight's dtype, as the model does, then upcast)."""
    logits = torch.nn.functional.linear(h, weight, bias).float()
    return logits.div_(temperature) if temperature != 1.0 else logits


DEFAULT_CHUNK_TOKENS = 512
"""Rows of logits at once unless told: at 2,048 response tokens per micro-batch the pass holds a quarter of
them (bench/memory.py measures the peak against the full logits); the matrix product per chunk (512 × H × V)
is still large enough to keep a GPU busy. Liger's fused cross-entropy picks chunks of the same order
(N / ⌈V / H⌉ rows: ~250 at Qwen2.5-Math-1.5B's 8 × 3,072 tokens)."""

CHUNK_BYTES_PER_LOGIT = 8
"""Peak bytes per (token, vocabulary) entry of one chunk, forward or backward: two fp32 (n, V) tensors alive at
once (the logits and their exp / softmax; everything else is updated in place). The memory plan's log-prob term
is ``CHUNK_BYTES_PER_LOGIT × chunk_tokens × V`` (prl.training.memory); in the backward pass the plan adds the
LM head's fp32 gradient accumulator (V × H), which each chunk's ``g.t() @ h`` is added into in place (measured
by bench/memory.py: at 128-token chunks on SmolLM2 the accumulator outweighs the chunk's logits)."""


class _ChunkedLogProbs(torch.autograd.Function):
    """logp = log_softmax(linear(hidden, weight, bias) / temperature)[targets], chunk by chunk; the entropy as a
    non-differentiable second output. Each chunk holds at most two fp32 (chunk, V) tensors."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk_tokens: int, temperature: float, want_entropy: bool):
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        ent = hidden.new_zeros(n, dtype=torch.float32)
        with torch.no_grad():
            for s in range(0, n, chunk_tokens):
                logits = _chunk_logits(hidden[s:s + chunk_tokens], weight, bias, temperature)
                lse = torch.logsumexp(logits, dim=-1, keepdim=True)
                log_p = logits.sub_(lse)  # in place: the logits become log-probabilities
                logp[s:s + chunk_tokens] = log_p.gather(-1, targets[s:s + chunk_tokens, None]).squeeze(-1)
                if want_entropy:  # H = -sum p log p; LM-head logits are finite, so log p is too
                    ent[s:s + chunk_tokens] = -log_p.exp().mul_(log_p).sum(-1)
                del logits, log_p
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.chunk_tokens, ctx.temperature = chunk_tokens, temperature
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp, _grad_ent):
        hidden, weight, bias, targets = ctx.saved_tensors
        c, temperature = ctx.chunk_tokens, ctx.temperature
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if (need_b and bias is not None) else None
        for s in range(0, hidden.shape[0], c):
            h, g_out = hidden[s:s + c], grad_logp[s:s + c].float()
            logits = _chunk_logits(h, weight, bias, temperature)
            # d logp / d logits = onehot(target) - softmax(logits), times 1/temperature
            g = torch.softmax(logits, dim=-1)
            del logits
            g.mul_(-g_out.unsqueeze(-1)).scatter_add_(-1, targets[s:s + c, None], g_out.unsqueeze(-1))
            if temperature != 1.0:
                g.div_(temperature)
            if need_h:
                grad_h[s:s + c] = (g.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w.addmm_(g.t(), h.float())  # in place: no V x H product per chunk
            if grad_b is not None:
                grad_b += g.sum(0)
            del g
        return (grad_h, grad_w.to(weight.dtype) if need_w else None,
                grad_b.to(bias.dtype) if grad_b is not None else None, None, None, None, None)


def token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                   bias: torch.Tensor | None = None, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, temperature: float = 1.0,
                   entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target token, and optionally the entropy of its distribution, chunk by chunk.

    Equal (to float rounding) to ``log_softmax(linear(hidden, weight, bias) / temperature).gather(targets)``
    and to :func:`prl_core.losses.token_entropy` of the same logits, without ever holding more than
    ``chunk_tokens`` rows of logits, in the forward pass or the backward pass.

    Args:
        hidden: (N, H) float final hidden states, row i predicting ``targets[i]`` (grad may flow).
        weight: (V, H) the LM head's weight (grad may flow); ``bias``: its optional (V,) bias.
        targets: (N,) long token ids.
        chunk_tokens: rows of logits computed at once (≥ 1); the peak memory of this function is
            :data:`CHUNK_BYTES_PER_LOGIT` × chunk_tokens × V bytes (plus the (N,) outputs).
        temperature: the sampling temperature (> 0) the tokens were drawn at; logits are divided by it.
        entropy: also return the (N,) entropies (detached).

    Returns:
        ``(logp, entropy)``: (N,) float32 log-probs (differentiable w.r.t. ``hidden``, ``weight`` and
        ``bias``) and (N,) float32 entropies, or None without ``entropy``.
    """
    hidden = require_float("hidden", hidden)
    weight = require_float("weight", weight)
    targets = require_tensor("targets", targets)
    if hidden.dim() != 2:
        raise ValueError(f"hidden: expected shape (N, H), got {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"weight: expected shape (V, {hidden.shape[1]}), got {tuple(weight.shape)}")
    if targets.dim() != 1 or targets.shape[0] != hidden.shape[0] or targets.dtype != torch.long:
        raise ValueError(f"targets: expected a ({hidden.shape[0]},) long tensor, got {tuple(targets.shape)} "
                         f"{targets.dtype}")
    if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
        raise ValueError(f"chunk_tokens: expected an integer >= 1, got {chunk_tokens!r}")
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature!r}")
    logp, ent = _ChunkedLogProbs.apply(hidden, weight, bias, targets, chunk_tokens, float(temperature), entropy)
    return logp, (ent if entropy else None)
