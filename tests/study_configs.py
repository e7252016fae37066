"""Test helper: the small study config that tests/test_study.py and tests/test_ray_runner.py run (2 cells, GRPO
and PRL at η = 10, 2 training steps each on the warm-started tiny model, evaluated on 6 synthetic problems)."""

from __future__ import annotations

from pathlib import Path

import yaml


def small_study(tmp_path: Path, model: Path | str, *, study_id: str = "mini", seeds: tuple[int, ...] = (0, 1)) -> Path:
    """Write the study config under ``tmp_path`` and return its path (out_dir ``tmp_path/study``)."""
    doc = {"study": {"id": study_id, "out_dir": str(tmp_path / "study"), "seeds": list(seeds), "baseline": "grpo",
                     "eval": {"datasets": ["synth_test:6"], "n": 2}},
           "base": {"algorithm": {"n_samples": 2},
                    # engine hf: the study machinery is under test here; vLLM rollouts are tests/test_train.py's
                    # (each of the trainer processes would import and start vLLM, ~11 s)
                    "train": {"model": str(model), "engine": "hf", "steps": 2, "prompts_per_step": 2, "mini_batch_size": 4,
                              "micro_batch_size": 4, "max_tokens": 48, "checkpoint_every": 1, "segments_per_step": 1,
                              "lr": 1e-4, "heldout_problems": 4}},
           "cells": [{"name": "grpo", "algorithm": {"estimator": "grpo"}},
                     {"name": "prl", "algorithm": {"estimator": "prl", "eta": 10, "step_split": "text:\n\n"}}],
           "claims": [{"id": "pass2", "text": "PRL passes more at k = 2", "metric": "pass@2", "higher": True,
                       "cell": "prl", "against": ["grpo"]},
                      {"id": "entropy", "text": "PRL keeps a higher held-out entropy", "metric": "heldout/entropy",
                       "higher": True, "cell": "prl", "against": ["grpo"]}]}
    path = tmp_path / f"{study_id}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
