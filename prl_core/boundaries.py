"""Step segmentation: which response tokens end a step (a *boundary*).

PRL takes its token weight at step boundaries and gives every token of a segment the
value at the segment's last token (docs/architecture.md §Steps). A split is written as a string:

- ``"token"``       every response token is its own step (exact token-level Eq. 3.1);
- ``"fixed:N"``     every N-th response token (1-indexed: N, 2N, ...);
- ``"text:<d>"``    every token in which an occurrence of the delimiter ``d`` ends, in the
                    row's decoded response text (``d`` is a Python escape: ``text:\\n\\n``).
                    A merged token such as ``".\\n\\n"`` therefore counts, and so does a
                    delimiter that the tokenizer split across two tokens (the boundary is
                    the token where it completes).

In every split the last response token of a row is a boundary; a row with no response
tokens has none. Response tokens are counted through the mask, so prompt columns and
padding (mask 0) anywhere in the row are skipped.
"""

from __future__ import annotations

import bisect
import codecs
from dataclasses import dataclass
from typing import Sequence

import torch

from ._checks import require_mask


@dataclass(frozen=True)
class StepSplit:
    """A parsed split string: ``kind`` is ``token``, ``fixed`` or ``text``."""

    kind: str
    every: int = 0
    delimiter: str = ""

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.every}"
        if self.kind == "text":
            return "text:" + self.delimiter.encode("unicode_escape").decode("ascii")
        return "token"


def parse_split(split: object) -> StepSplit:
    """Parse ``"token"``, ``"fixed:N"`` (N >= 1) or ``"text:<delimiter>"``; ValueError otherwise."""
    if isinstance(split, StepSplit):
        return split
    if not isinstance(split, str):
        raise ValueError(f"split: expected a string such as 'token', 'fixed:256' or 'text:\\n\\n', got {split!r}")
    if split == "token":
        return StepSplit("token")
    kind, sep, arg = split.partition(":")
    if sep and kind == "fixed":
        try:
            every = int(arg)
        except ValueError:
            every = 0
        if every < 1 or str(every) != arg.strip():
            raise ValueError(f"split: 'fixed:N' needs a positive integer N, got {split!r}")
        return StepSplit("fixed", every=every)
    if sep and kind == "text":
        delimiter = _unescape(arg)
        if not delimiter:
            raise ValueError(f"split: 'text:<delimiter>' needs a non-empty delimiter, got {split!r}")
        return StepSplit("text", delimiter=delimiter)
    raise ValueError(
        f"split: unknown split {split!r}; expected 'token', 'fixed:N' or 'text:<delimiter>' "
        "(e.g. 'fixed:256', 'text:\\n\\n')"
    )


def _unescape(s: str) -> str:
    """Turn the Python escapes of a config string (``\\n``, ``\\t``, ``\\u2028``) into characters.

    Real newlines already in ``s`` are kept; no code is evaluated.
    """
    try:
        return codecs.decode(s.encode("latin-1", "backslashreplace"), "unicode_escape")
    except UnicodeDecodeError as e:
        raise ValueError(f"split: bad escape in delimiter {s!r}: {e}") from None


def last_response_token(mask: torch.Tensor) -> torch.Tensor:
    """Bool (B, T): True at the last True of each row of ``mask`` (B, T); rows without any have none."""
    T = mask.shape[-1]
    if T == 0:
        return mask.clone()
    pos = torch.arange(T, device=mask.device)
    last = torch.where(mask, pos, -1).amax(dim=-1, keepdim=True)  # (B, 1), -1 for empty rows
    return (pos == last) & mask


def step_boundaries(
    mask: torch.Tensor,
    split: str | StepSplit,
    token_texts: Sequence[Sequence[str | None]] | None = None,
) -> torch.Tensor:
    """Boundary mask for a split.

    Args:
        mask: bool (B, T), True on response tokens.
        split: ``"token"``, ``"fixed:N"`` or ``"text:<delimiter>"`` (see module docstring).
        token_texts: for ``text:`` splits only, the decoded text of each token. ``token_texts[b]``
            has either T entries (one per column; masked columns are ignored and may be None) or
            exactly as many entries as row b has response tokens (mapped onto them in order).

    Returns:
        bool (B, T), a subset of ``mask``; the last response token of every non-empty row is True.
    """
    mask = require_mask("mask", mask)
    sp = parse_split(split)
    if sp.kind != "text" and token_texts is not None:
        raise ValueError(f"token_texts: only used by 'text:' splits, but split is {str(sp)!r}")
    if sp.kind == "token":
        return mask.clone()
    last = last_response_token(mask)
    if sp.kind == "fixed":
        count = torch.cumsum(mask, dim=-1, dtype=torch.int32)  # 1-indexed position among response tokens
        return (mask & (count % sp.every == 0)) | last
    return _text_boundaries(mask, sp.delimiter, token_texts) | last


def segment_bounds(boundaries: torch.Tensor) -> list[tuple[int, int]]:
    """The segments of one row: (first column, boundary column) for each True of ``boundaries`` (T,), the
    first segment starting at column 0 and each next one after the previous boundary."""
    out, start = [], 0
    for end in torch.nonzero(boundaries).flatten().tolist():
        out.append((start, end))
        start = end + 1
    return out


def _text_boundaries(mask: torch.Tensor, delimiter: str, token_texts) -> torch.Tensor:
    B, T = mask.shape
    if token_texts is None:
        raise ValueError("token_texts: required for 'text:' splits (the decoded text of every token)")
    if len(token_texts) != B:
        raise ValueError(f"token_texts: expected {B} rows (one per mask row), got {len(token_texts)}")
    out = torch.zeros(B, T, dtype=torch.bool)
    mask_cpu = mask.cpu()
    for b in range(B):
        cols = torch.nonzero(mask_cpu[b]).squeeze(1).tolist()
        row = token_texts[b]
        if len(row) == T:
            texts = [row[c] for c in cols]
        elif len(row) == len(cols):
            texts = list(row)
        else:
            raise ValueError(
                f"token_texts[{b}]: expected {T} entries (one per column) or {len(cols)} "
                f"(one per response token), got {len(row)}"
            )
        for j, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"token_texts[{b}]: response token {j} (column {cols[j]}) has no text ({t!r})")
        for j in _tokens_ending_delimiter(texts, delimiter):
            out[b, cols[j]] = True
    return out.to(mask.device)


def _tokens_ending_delimiter(texts: list[str], delimiter: str) -> set[int]:
    """Indices of tokens in which an occurrence (overlaps included) of ``delimiter`` ends."""
    ends, total = [], 0
    for t in texts:
        total += len(t)
        ends.append(total)  # exclusive end offset of each token in the joined text
    joined = "".join(texts)
    hits: set[int] = set()
    start = joined.find(delimiter)
    while start != -1:
        last_char = start + len(delimiter) - 1
        hits.add(bisect.bisect_right(ends, last_char))
        start = joined.find(delimiter, start + 1)
    return hits
