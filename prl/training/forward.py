"""The trainer's forward pass: response-token log-probs (and entropy) of a micro-batch, without the logits.

Sequences are right-padded, so no attention mask is passed: under causal attention a real token never
reaches the padding after it (its hidden state is the same, tested), and without a mask attention runs
its causal kernels (flash / memory-efficient on GPUs) instead of materialising a (b, heads, L, L) mask.
The model is called as a whole (through DeepSpeed's engine when training, so ZeRO-3's parameter hooks
see the usual order) with ``logits_to_keep=1``: the LM head runs on one position per row. The final
hidden states (after the last norm) are read off the decoder with a forward hook; only the response
tokens' rows are kept, and :func:`prl_core.logprobs.token_logprobs` applies the LM head's weight to them
a chunk at a time. That second use of the head goes through the head module once (its forward is
swapped for the call), so ZeRO-3 gathers the partitioned weight for it — once forward, once backward —
and every rank makes the same collectives however many response tokens it holds. Token t of row b sits at column ``prompt_len[b] + t`` and is predicted by the hidden state of
the column before it; logits are divided by the sampling temperature, as the rollouts were drawn.
"""

from __future__ import annotations

import torch

from prl_core.logprobs import DEFAULT_CHUNK_TOKENS, token_logprobs

from prl.training.batches import MicroBatch


def _unwrap(model):
    return getattr(model, "module", model)  # a DeepSpeed engine wraps the Hugging Face model


def response_logprobs(model, mb: MicroBatch, *, temperature: float = 1.0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                      entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(b, T_mb) float32 log-probs of ``mb``'s response tokens under ``model`` (0 off the mask) and, with
    ``entropy``, their (b, T_mb) entropies (detached). Differentiable when gradients are enabled."""
    hf = _unwrap(model)
    captured: list[torch.Tensor] = []

    def keep(_module, _args, output):
        captured.append(output[0])  # last_hidden_state (a ModelOutput or a tuple)

    hook = hf.get_decoder().register_forward_hook(keep)
    try:
        model(input_ids=mb.input_ids, logits_to_keep=1, use_cache=False)
    finally:
        hook.remove()
    hidden = captured[-1]  # (b, L_mb, H); with gradient checkpointing the decoder ran once in this pass
    b_idx, t_idx = mb.mask.nonzero(as_tuple=True)
    rows = hidden[b_idx, mb.prompt_len[b_idx] - 1 + t_idx]  # (N, H): the states that predict each response token
    targets = mb.response_ids[b_idx, t_idx]
    head = hf.get_output_embeddings()

    def chunked(h):  # runs as the head module's forward: ZeRO-3 has gathered head.weight for it
        return token_logprobs(h, head.weight, targets, bias=head.bias, chunk_tokens=chunk_tokens,
                              temperature=temperature, entropy=entropy)

    head.forward = chunked  # an instance attribute: the class's forward returns when it is deleted
    try:
        logp_flat, ent_flat = head(rows)
    finally:
        del head.forward
    shape = tuple(mb.mask.shape)
    logp = torch.zeros(shape, dtype=torch.float32, device=rows.device).index_put((b_idx, t_idx), logp_flat)
    ent = None
    if entropy:
        ent = torch.zeros(shape, dtype=torch.float32, device=rows.device).index_put((b_idx, t_idx), ent_flat)
    return logp, ent
