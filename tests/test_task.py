"""The synthetic task: deterministic, disjoint splits, correct step-by-step solutions."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from prl.data import synthetic
from prl.grading.verifier import is_correct

STEP = re.compile(r"^(\d+) ([+*-]) (\d+) = (\d+)$")


def test_deterministic_and_seeded():
    assert synthetic.generate("train", 50, seed=3) == synthetic.generate("train", 50, seed=3)
    assert synthetic.generate("train", 50, seed=3) != synthetic.generate("train", 50, seed=4)
    assert synthetic.generate("test", 20) == synthetic.generate("test", 400)[:20]  # a prefix of the full split


def test_splits_never_share_a_problem():
    test = {r["problem"] for r in synthetic.generate("test", synthetic.TEST_SIZE)}
    train = {r["problem"] for r in synthetic.generate("train", 5000)}
    assert test and train and not (test & train)


def test_solutions_are_correct_steps_separated_by_blank_lines():
    records = synthetic.generate("test", synthetic.TEST_SIZE)
    assert Counter(r["level"] for r in records) == {1: 100, 2: 100, 3: 100, 4: 100}
    for r in records:
        *steps, final = r["solution"].split("\n\n")
        assert len(steps) == r["level"]
        value = None
        for line in steps:
            a, op, b, c = STEP.match(line).groups()
            a, b, c = int(a), int(b), int(c)
            assert value is None or a == value
            assert c == {"+": a + b, "-": a - b, "*": a * b}[op]
            assert 0 <= c <= synthetic.MAX_VALUE
            value = c
        assert r["answer"] == str(value)
        assert final == f"The answer is \\boxed{{{value}}}."
        assert r["problem"].startswith(r["problem"].split()[0] + " has ")


def test_reference_solutions_pass_the_verifier_and_wrong_ones_fail():
    for r in synthetic.generate("test", 40):
        assert is_correct(r["solution"], r["answer"])
        assert not is_correct(r["solution"], str(int(r["answer"]) + 1))


def test_jsonl_uses_the_benchmark_schema(tmp_path):
    path = synthetic.write_jsonl(synthetic.generate("test", 5), tmp_path / "synth.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 5
    for row in rows:
        assert set(row) == {"id", "problem", "solution", "answer", "level"}
        assert isinstance(row["problem"], str) and isinstance(row["answer"], str)


def test_bad_arguments():
    with pytest.raises(ValueError, match="^split"):
        synthetic.generate("dev", 3)
    with pytest.raises(ValueError, match="^level"):
        synthetic.make_problem(__import__("random").Random(0), 7)
