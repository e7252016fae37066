"""Step boundaries on a real tokenizer's ids, for tests/test_qwen.py and tests/test_llama.py: the boundary
positions of a response and how many of the benchmark solutions' blank lines they find."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from prl_core.boundaries import step_boundaries

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "prl" / "data" / "benchmarks").glob("*.jsonl"))
DELIMITER = "text:\\n\\n"  # the config string: a backslash-escaped blank line


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def boundaries(tok, text: str) -> tuple[list[int], list[str], list[int]]:
    """(ids, each id decoded on its own, boundary positions) of ``text`` as one response."""
    ids = encode(tok, text)
    texts = [tok.decode([i]) for i in ids]
    bnd = step_boundaries(torch.ones(1, len(ids), dtype=torch.bool), DELIMITER, token_texts=[texts])
    return ids, texts, bnd[0].nonzero().flatten().tolist()


def blank_line_runs(tok, blank_id: int) -> dict[str, int]:
    """Over the solutions (first 60 lines of the first three benchmark files) holding a blank line: every maximal
    run of >= 2 newlines (``runs``), how many overlap one of our boundary tokens (``ours``), and how many overlap
    a token whose id is ``blank_id`` ("\\n\\n" alone; ``by_id``). Asserts the ids decode back to the text."""
    runs = ours_hit = by_id = 0
    for path in BENCHMARKS[:3]:
        for line in path.read_text(encoding="utf-8").splitlines()[:60]:
            text = json.loads(line).get("solution")
            if not isinstance(text, str) or "\n\n" not in text:
                continue
            ids, texts, ours = boundaries(tok, text)
            assert "".join(texts) == text
            ends = [0]
            for t in texts:
                ends.append(ends[-1] + len(t))
            for m in re.finditer(r"\n{2,}", text):
                runs += 1
                overlapping = [j for j in range(len(ids)) if ends[j] < m.end() and ends[j + 1] > m.start()]
                ours_hit += any(j in ours for j in overlapping)
                by_id += any(ids[j] == blank_id for j in overlapping)
    return {"runs": runs, "ours": ours_hit, "by_id": by_id}
