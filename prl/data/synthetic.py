"""The synthetic task: multi-step arithmetic word problems with step-by-step solutions.

Each problem chains 1–4 operations on whole numbers. The reference solution writes one
operation per step, steps separated by blank lines, and ends in ``\\boxed{answer}`` — so the
``text:\\n\\n`` step split and PRL's per-step credit have something to work on:

    Mia has 7 shells. She finds 5 more, then triples them, then gives away 4.
    How many shells does Mia have now?

    7 + 5 = 12

    12 * 3 = 36

    36 - 4 = 32

    The answer is \\boxed{32}.

Records use the schema of the bundled benchmarks (``problem``, ``solution``, ``answer``,
``level``, ``id``), so the synthetic set loads, prompts and grades like any other data set.
Splits are deterministic functions of (seed, split, index); train and test never share a
problem text.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

LEVELS = (1, 2, 3, 4)
"""Difficulty = number of chained operations."""

NAMES = ("Mia", "Sam", "Ava", "Leo", "Zoe", "Max", "Ivy", "Ben", "Eva", "Tom", "Lia", "Noah")
OBJECTS = ("shells", "apples", "coins", "stamps", "marbles", "books", "cards", "pens", "beads", "rocks")
MAX_VALUE = 99  # every intermediate result stays in 0..99, so each step is one two-digit fact


@dataclass(frozen=True)
class Step:
    op: str  # "+", "-", "*"
    operand: int
    before: int
    after: int

    def line(self) -> str:
        return f"{self.before} {self.op} {self.operand} = {self.after}"


def _phrase(step: Step, rng: random.Random) -> str:
    if step.op == "+":
        return rng.choice((f"finds {step.operand} more", f"gets {step.operand} more", f"buys {step.operand} more"))
    if step.op == "-":
        return rng.choice((f"gives away {step.operand}", f"loses {step.operand}", f"uses {step.operand}"))
    return {2: "doubles them", 3: "triples them"}.get(step.operand, f"multiplies them by {step.operand}")


def _steps(rng: random.Random, level: int) -> tuple[int, list[Step]]:
    start = rng.randint(2, 30)
    value, steps = start, []
    for _ in range(level):
        choices = ["+", "-"] + (["*"] if value <= MAX_VALUE // 2 else [])
        op = rng.choice(choices)
        if op == "+" and value >= MAX_VALUE - 1:
            op = "-"
        if op == "-" and value <= 1:
            op = "+"
        if op == "+":
            operand = rng.randint(1, min(30, MAX_VALUE - value))
            after = value + operand
        elif op == "-":
            operand = rng.randint(1, min(30, value - 1))
            after = value - operand
        else:
            operand = rng.randint(2, min(5, MAX_VALUE // value))
            after = value * operand
        steps.append(Step(op, operand, value, after))
        value = after
    return start, steps


def make_problem(rng: random.Random, level: int) -> dict:
    """One problem of ``level`` operations: problem text, step solution, integer answer."""
    if level not in LEVELS:
        raise ValueError(f"level: expected one of {LEVELS}, got {level!r}")
    start, steps = _steps(rng, level)
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    actions = [_phrase(s, rng) for s in steps]
    story = f"{name} {actions[0]}" + "".join(f", then {a}" for a in actions[1:]) + "."
    problem = f"{name} has {start} {obj}. {story} How many {obj} does {name} have now?"
    answer = steps[-1].after
    solution = "\n\n".join([s.line() for s in steps] + [f"The answer is \\boxed{{{answer}}}."])
    return {"problem": problem, "solution": solution, "answer": str(answer), "level": level}


def direct_solution(record: dict) -> str:
    """The answer without the working: ``The answer is \\boxed{N}.`` (the last line of the solution)."""
    return f"The answer is \\boxed{{{record['answer']}}}."


def shows_working(response: str) -> bool:
    """Whether a response computes at least one step (a line with ``=``) before its answer."""
    return "=" in response.split("The answer is", 1)[0]


def generate(split: str, n: int, *, seed: int = 0, levels: tuple[int, ...] = LEVELS) -> list[dict]:
    """``n`` problems of ``split`` ("train" or "test"), levels in equal shares, deterministic.

    Test problems are drawn first from their own stream; train problems whose text appears
    in the test set are skipped, so the two splits never share a problem.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    exclude: set[str] = set()
    if split == "train":
        exclude = {r["problem"] for r in generate("test", TEST_SIZE, seed=seed, levels=levels)}
    rng = random.Random(f"prl-synth:{seed}:{split}")
    out: list[dict] = []
    i = 0
    while len(out) < n:
        level = levels[i % len(levels)]
        rec = make_problem(rng, level)
        i += 1
        if rec["problem"] in exclude:
            continue
        rec = {"id": f"synth-{split}-{len(out):06d}", **rec}
        out.append(rec)
    return out


TEST_SIZE = 400
"""Size of the held-out test split (100 problems per level)."""
TRAIN_SIZE = 20000
"""Training problems the embedded default draws (SFT warm start, RL prompts, ``prl data`` and the demo's
``synth_train.jsonl``; levels in equal shares)."""


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def corpus(records: list[dict]) -> Iterator[str]:
    """Texts the tokenizer is trained on: every problem and solution."""
    for r in records:
        yield r["problem"]
        yield r["solution"]
