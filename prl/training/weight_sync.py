"""The policy's weights as the rollout engine takes them: named tensors, one layer group at a time.

After every update each rank hands its policy to its own colocated engine from memory
(:meth:`prl.generation.engines.base.Engine.load_weight_groups`). Under ZeRO-3 a rank holds only a
partition of every parameter: each group is gathered whole just before it is handed over and released
after (:func:`weight_groups`), so at most one layer is ever gathered — never the whole model (the
largest group is the embedding: vocabulary x hidden). ZeRO 0-2 keep whole parameters on every rank and
hand them over as they are. Every rank iterates the groups in the same order, which the gathers need.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from prl.generation.engines.base import layer_groups


def named_weights(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of the model's weights by their checkpoint (``state_dict``) names, each shared tensor
    once (a tied LM head is dropped, as ``save_pretrained`` drops it): the parameters and persistent buffers,
    not copies. Under ZeRO-3 the parameters are this rank's partitions until gathered."""
    out = list(module.named_parameters())  # shared parameters once, under their first name
    for prefix, sub in module.named_modules():
        for name, buf in sub.named_buffers(recurse=False):
            if buf is not None and name not in sub._non_persistent_buffers_set:
                out.append((f"{prefix}.{name}" if prefix else name, buf))
    return out


def weight_groups(module: torch.nn.Module, zero_stage: int) -> Iterator[tuple[list[str], list[torch.Tensor]]]:
    """The model's weights grouped by layer (:func:`prl.generation.engines.base.layer_groups`), yielded one
    group at a time, each gathered whole under ZeRO-3 while it is out (consume it before asking for the next)."""
    named = dict(named_weights(module))
    for names in layer_groups(list(named)):
        tensors = [named[n] for n in names]
        with _gathered(tensors, zero_stage):
            yield names, [t.data for t in tensors]


def _gathered(tensors: list[torch.Tensor], zero_stage: int):
    params = [t for t in tensors if isinstance(t, torch.nn.Parameter) and hasattr(t, "ds_id")]
    if zero_stage != 3 or not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def policy_state_dict(engine, zero_stage: int) -> dict[str, torch.Tensor] | None:
    """The policy's weights for an export, never the whole model gathered on a device at once.

    ZeRO-3: DeepSpeed's own module-by-module 16-bit gather (``engine._zero3_consolidated_16bit_state_dict``):
    each module's parameters are gathered, copied to rank 0's host memory and released before the next, so a
    rank's device holds at most one module's weights more (the memory plan's "export" moment) and rank 0's
    host the whole 16-bit model; None on the other ranks. Every rank must call it (the gathers are
    collectives). Stages 0-2: None (the module's parameters are whole already; ``save_pretrained`` copies each
    to the host as it writes it)."""
    if zero_stage != 3:
        return None
    return engine._zero3_consolidated_16bit_state_dict()
