"""Slow, obvious reference implementations (plain Python over lists) of docs/architecture.md §The PRL math.

Nothing here is vectorised or shared with prl_core: each quantity is written the way the
definition reads, so the fast code is checked against the math, not against itself.
"""

from __future__ import annotations

import math


def group_adv(rewards, groups, normalize_std=True, eps=1e-6):
    out = []
    for i, r in enumerate(rewards):
        members = [rewards[j] for j in range(len(rewards)) if groups[j] == groups[i]]
        n = len(members)
        if n == 1:
            out.append(r)
            continue
        if max(members) == min(members):
            out.append(0.0)
            continue
        mean = sum(members) / n
        if not normalize_std:
            out.append(r - mean)
            continue
        std = math.sqrt(sum((m - mean) ** 2 for m in members) / (n - 1))
        out.append((r - mean) / (std + eps))
    return out


def suffix(values, mask):
    """values, mask: lists of rows. S[b][t] = sum over j >= t of mask*values."""
    out = []
    for row, m in zip(values, mask):
        out.append([sum(row[j] for j in range(t, len(row)) if m[j]) for t in range(len(row))])
    return out


def boundaries(mask, split, texts=None):
    out = []
    for b, m in enumerate(mask):
        cols = [t for t in range(len(m)) if m[t]]
        row = [False] * len(m)
        if split == "token":
            for c in cols:
                row[c] = True
        elif split.startswith("fixed:"):
            n = int(split.split(":")[1])
            for k, c in enumerate(cols, start=1):
                if k % n == 0:
                    row[c] = True
        else:
            delim = split[len("text:"):]
            # character-by-character: token j is a boundary if some occurrence ends inside it
            chars = []  # (char, token index)
            for j, c in enumerate(cols):
                for ch in texts[b][c]:
                    chars.append((ch, j))
            text = "".join(ch for ch, _ in chars)
            for start in range(len(text) - len(delim) + 1):
                if text[start:start + len(delim)] == delim:
                    row[cols[chars[start + len(delim) - 1][1]]] = True
        if cols:
            row[cols[-1]] = True
        out.append(row)
    return out


def prl(rewards, groups, old, ref, mask, eta, bnd=None, order="advantage_first", normalize_std=True, eps=1e-6):
    B = len(rewards)
    if bnd is None:
        bnd = [list(m) for m in mask]
    k = [[(old[b][t] - ref[b][t]) for t in range(len(mask[b]))] for b in range(B)]
    S = suffix(k, mask) if not math.isinf(eta) else [[0.0] * len(m) for m in mask]
    if order == "advantage_first":
        A = group_adv(rewards, groups, normalize_std, eps)
        val = [[A[b] - S[b][t] / eta for t in range(len(mask[b]))] for b in range(B)]
    else:
        raw = {(b, t): rewards[b] - S[b][t] / eta for b in range(B) for t in range(len(mask[b])) if bnd[b][t]}
        val = [[0.0] * len(m) for m in mask]
        for (b, t), r in raw.items():
            pool = [v for (bb, tt), v in raw.items() if groups[bb] == groups[b]]
            n = len(pool)
            if n == 1:
                val[b][t] = r
            elif max(pool) == min(pool):
                val[b][t] = 0.0
            else:
                mean = sum(pool) / n
                std = math.sqrt(sum((p - mean) ** 2 for p in pool) / (n - 1))
                val[b][t] = (r - mean) / (std + eps) if normalize_std else r - mean
    out = []
    for b in range(B):
        row = [0.0] * len(mask[b])
        for t in range(len(mask[b])):
            if not mask[b][t]:
                continue
            nxt = next(j for j in range(t, len(mask[b])) if bnd[b][j])
            row[t] = val[b][nxt]
        out.append(row)
    return out


def ppo_token_loss(logp, logp_old, adv, clip_low, clip_high, dual_clip):
    ratio = math.exp(max(-20.0, min(20.0, logp - logp_old)))
    clipped_ratio = min(max(ratio, 1 - clip_low), 1 + clip_high)
    loss = -min(ratio * adv, clipped_ratio * adv)
    if dual_clip is not None and adv < 0:
        loss = min(loss, dual_clip * abs(adv))
    return loss
