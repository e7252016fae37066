"""Inspect AI task that produces the `prl import --format inspect` test fixture.

The first ``limit`` rows of ``prl data synth``'s ``synth_test.jsonl`` (id, problem, answer, solution,
level) become Samples (id = row id, input = problem, target = answer).  The prompt is rendered the way
the project's own engines render it (prl/generation/prompts.py: system prompt + problem + suffix, through
the model's chat template), using only solvers Inspect ships; the scorer is Inspect's built-in
``pattern`` on the boxed answer, so every sample/epoch gets a C/I score and ``score.answer`` holds the
extracted text.  Run by make_fixture.sh; see tests/data/formats/inspect/PROVENANCE.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import pattern
from inspect_ai.solver import generate, prompt_template, system_message

# Same text as prl.generation.prompts.SYSTEM_PROMPT / USER_SUFFIX (copied: this env does not install prl).
SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
USER_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}"
BOXED = r"\\boxed\{(.*?)\}"


def load_samples(data: str, limit: int) -> list[Sample]:
    samples = []
    with Path(data).open(encoding="utf-8") as f:
        for line in f:
            if len(samples) >= limit:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            samples.append(Sample(id=row["id"], input=row["problem"], target=str(row["answer"]),
                                  metadata={"level": row.get("level")}))
    return samples


@task
def prl_synth(data: str, limit: int = 20, epochs: int = 2, temperature: float = 1.0,
              max_tokens: int = 200) -> Task:
    # format_template (str.format style): braces of the literal \boxed{} are doubled.
    template = "{prompt}" + USER_SUFFIX.replace("{", "{{").replace("}", "}}")
    return Task(
        dataset=MemoryDataset(load_samples(data, limit), name="prl-synth-test"),
        solver=[system_message(SYSTEM_PROMPT.replace("{", "{{").replace("}", "}}")),
                prompt_template(template), generate()],
        scorer=pattern(BOXED),
        epochs=epochs,
        config=GenerateConfig(temperature=temperature, max_tokens=max_tokens),
    )
