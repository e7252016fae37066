"""The records passed between a training step's phases, and how a batch is cut into micro-batches.

A step's rollouts (:class:`Rollouts`) are packed once, right-padded to the step's longest sequence.
Every forward pass then runs on a :class:`MicroBatch`: some rows of it, cut to *their own* longest
sequence and response, so no pass computes over the step's padding. Micro-batches hold
``micro_batch_size`` rows, or — with a token budget — as many rows as fit in it, in as few micro-batches
as every rank can agree on (ZeRO's collectives need the same number of passes on every rank).

Shapes: B rollouts of a rank, L = the longest prompt + response, T = the longest response.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Rollouts:
    """One rank's rollouts of a step, verified."""

    input_ids: torch.Tensor  # (B, L) long, right-padded prompt + response
    prompt_len: torch.Tensor  # (B,) long
    response_ids: torch.Tensor  # (B, T) long
    mask: torch.Tensor  # (B, T) bool, True on response tokens
    rollout_logp: torch.Tensor  # (B, T) float, the engine's log-prob of each sampled token (0 off the mask)
    group_ids: torch.Tensor  # (B,) long, one id per prompt
    rewards: torch.Tensor  # (B,) float
    texts: list[str]
    golds: list[str]
    prompt_index: list[int]
    verdicts: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) prompt + response tokens of each rollout."""
        return self.prompt_len + self.mask.sum(1)


@dataclass
class LogProbs:
    """The no-gradient log-probs of a step's rollouts, (B, T) float32, 0 off the mask."""

    old: torch.Tensor
    """Under the policy that sampled them (the policy before this step's update)."""
    ref: torch.Tensor | None
    """Under the frozen reference (None when the run loads none: :meth:`TrainConfig.needs_reference`)."""
    is_weights: torch.Tensor | None = None
    """The off-policy correction's per-token weights π_old/μ against the engine's own log-probs
    (:func:`prl_core.offpolicy.rollout_is_weights`; None with ``algorithm.rollout_is: off``)."""


@dataclass
class MicroBatch:
    """Rows of :class:`Rollouts`, cut to their own longest sequence (``L_mb``) and response (``T_mb``)."""

    rows: torch.Tensor  # (b,) long, indices into the step's rollouts
    input_ids: torch.Tensor  # (b, L_mb), right-padded (no attention mask is needed: see prl.training.forward)
    prompt_len: torch.Tensor  # (b,)
    response_ids: torch.Tensor  # (b, T_mb)
    mask: torch.Tensor  # (b, T_mb) bool

    @property
    def tokens(self) -> int:
        """Positions a forward pass over it computes (rows x longest sequence): what a token budget bounds."""
        return int(self.input_ids.shape[0] * self.input_ids.shape[1])

    def to(self, device: torch.device) -> "MicroBatch":
        return MicroBatch(self.rows, *(x.to(device) for x in (self.input_ids, self.prompt_len, self.response_ids,
                                                              self.mask)))


def pack(prompt_ids: list[list[int]], samples: list, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded (B, L) prompt+response ids and (B, T) response ids/mask for ``samples``."""
    B = len(samples)
    seqs = [prompt_ids[s.prompt_index] + list(s.token_ids) for s in samples]
    L = max(len(x) for x in seqs)
    T = max(max(len(s.token_ids) for s in samples), 1)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    response = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    rollout_logp = torch.zeros(B, T, dtype=torch.float32)
    for b, (seq, s) in enumerate(zip(seqs, samples)):
        input_ids[b, : len(seq)] = torch.tensor(seq)
        n = len(s.token_ids)
        response[b, :n] = torch.tensor(s.token_ids, dtype=torch.long)
        mask[b, :n] = True
        if getattr(s, "logprobs", None) is not None:
            rollout_logp[b, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
    prompt_len = torch.tensor([len(prompt_ids[s.prompt_index]) for s in samples], dtype=torch.long)
    return {"input_ids": input_ids, "prompt_len": prompt_len, "response_ids": response,
            "mask": mask, "rollout_logp": rollout_logp}


def micro_batch(r: Rollouts, rows: torch.Tensor) -> MicroBatch:
    """``rows`` of ``r`` cut to their own longest sequence and response."""
    L = int(r.lengths[rows].max())
    T = max(int(r.mask[rows].sum(1).max()), 1)
    return MicroBatch(rows, r.input_ids[rows, :L], r.prompt_len[rows], r.response_ids[rows, :T], r.mask[rows, :T])


def split_rows(rows: torch.Tensor, lengths: torch.Tensor, *, size: int, budget: int = 0,
               at_least: int = 1) -> list[torch.Tensor]:
    """Cut ``rows`` (in their order) into micro-batches.

    Without a budget: consecutive runs of ``size`` rows. With a ``budget``: consecutive runs whose rows x
    longest sequence stay within it, as few as the cut of :func:`_fits` allows and at least ``at_least`` (so
    every rank can run the same number; ``at_least`` ≤ the number of rows). A sequence longer than the budget
    is an error naming it.
    """
    if not budget:
        return list(rows.split(size))
    if at_least > len(rows):
        raise ValueError(f"cannot cut {len(rows)} rows into {at_least} non-empty micro-batches")
    lens = lengths[rows].tolist()
    too_long = [(int(r), n) for r, n in zip(rows.tolist(), lens) if n > budget]
    if too_long:
        raise ValueError(f"max_tokens_per_micro_batch {budget}: rollout {too_long[0][0]} has {too_long[0][1]} tokens "
                         f"(prompt + response); raise the budget above the longest sequence")
    k = max(at_least, 1)
    while True:
        cuts = _fits(lens, budget, k)
        if cuts is not None:
            return [rows[a:b] for a, b in cuts]
        k += 1


def _fits(lens: list[int], budget: int, k: int) -> list[tuple[int, int]] | None:
    """Cut ``lens`` into exactly k consecutive non-empty pieces with rows x max ≤ budget, each piece taking as
    many rows as fit while leaving at least one row for each remaining piece; None if it cannot."""
    n = len(lens)
    if k > n:
        return None
    cuts, start = [], 0
    for piece in range(k):
        left = k - piece - 1  # pieces still to fill after this one
        if left == 0:
            end = n
        else:
            end, longest = start, 0
            while end < n - left:
                longest_next = max(longest, lens[end])
                if (end - start + 1) * longest_next > budget:
                    break
                longest, end = longest_next, end + 1
            # spread rows evenly: no piece takes more than its share of the rows still to cut
            end = max(start + 1, min(end, start + -(-(n - start) // (k - piece))))
        if end <= start or (end - start) * max(lens[start:end]) > budget:
            return None
        cuts.append((start, end))
        start = end
    return cuts
