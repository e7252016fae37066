"""A tokenizer's view of steps, shared by the trainer (step boundaries, the stored ``prl_segments`` and
``train_rollouts`` rows) and the dry run's step preview: each response token decoded on its own, and
the step boundaries of a split (``text:`` splits read those token texts; docs/architecture.md §Steps).
The segments of a boundary row are :func:`prl_core.boundaries.segment_bounds`."""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from prl_core.boundaries import StepSplit, parse_split, step_boundaries


def token_texts(tokenizer, ids: Iterable[int] | torch.Tensor) -> list[str]:
    """Each token id decoded on its own, as ``text:`` splits and the dashboard's token view read them."""
    return _decoded_rows(tokenizer, [[int(t) for t in ids]])[0]


def _decoded_rows(tokenizer, rows: list[list[int]]) -> list[list[str]]:
    """Each row's ids decoded one token at a time: a token's text alone depends on its id only, so each distinct
    id of the batch is decoded once, in one ``batch_decode`` call (a step's responses repeat most of their ids)."""
    distinct = sorted({t for row in rows for t in row})
    text = dict(zip(distinct, tokenizer.batch_decode([[t] for t in distinct]))) if distinct else {}
    return [[text[t] for t in row] for row in rows]


def split_boundaries(tokenizer, response_ids: torch.Tensor | Sequence[Sequence[int]], mask: torch.Tensor,
                     split: str | StepSplit) -> torch.Tensor:
    """Step boundaries (B, T) of ``split`` over response token ids (B, T) and their mask; a ``text:`` split
    decodes each row's response tokens (:func:`token_texts`)."""
    sp = parse_split(split)
    texts = None
    if sp.kind == "text":
        texts = _decoded_rows(tokenizer, [torch.as_tensor(row)[m].tolist() for row, m in zip(response_ids, mask)])
    return step_boundaries(mask, sp, texts)
