"""The main job's typed configuration (``prl demo``'s flags come from its fields). Kept apart from
``flows/pipeline.py`` so that building the command line does not import Prefect."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from prl_core.config import ConfigError

from prl.data.datasets import BENCHMARKS, SYNTHETIC
from prl.options import NO_FLAG
from prl.store.db import store_path
from prl.training.config import WarmStart


@dataclass(frozen=True)
class PipelineConfig:
    """The main job on the embedded default (every size is small enough for 2 CPU cores)."""

    out_dir: str = "runs/demo"
    """Everything goes here: data, models, checkpoints, the store, the report."""
    db: str | None = None
    """Store file (default: OUT_DIR/store.duckdb)."""
    seed: int = 0
    """One seed for data, model, warm start, rollouts and evaluation sampling."""
    sft_steps: int = WarmStart.sft_steps
    """Warm-start steps, ~4 min on 2 cores (``WarmStart.sft_steps``)."""
    sft_eval_size: int = WarmStart.sft_eval_size
    """Held-out problems the warm start is scored on, greedy before and greedy and sampled after (``WarmStart.sft_eval_size``)."""
    direct_frac: float = WarmStart.direct_frac
    """Share of warm-start training solutions written without the working (``WarmStart.direct_frac``): the
    warm start then answers about half the problems directly, mostly wrongly on multi-step ones, and RL has
    a behaviour to learn (show the working). 0 gives a warm start that always shows it."""
    train_steps: int = 100
    """RL steps of each of PRL and GRPO."""
    prompts_per_step: int = 16
    """Prompts per RL step (× n_samples rollouts)."""
    n_samples: int = 5
    """Rollouts per prompt (the group size)."""
    lr: float = 2e-5
    """RL learning rate (Adam). Adam's early steps move every weight by ~lr whatever the gradient's size:
    one step at 1e-4 cut the log-probability of the batch's *rewarded* answers (-0.07 nats) as well as
    the others (-1.78); at 1e-5 it raised them (+0.15) and lowered the others (-0.12). 5e-5 and up
    left the held-out accuracy flat or lower (README, Status)."""
    updates_per_step: int = 5
    """Optimizer updates per RL step: the step's rollouts in this many PPO mini-batches (one pass)."""
    eta: float = 20.0
    """PRL's inverse KL strength, scaled to the task's ~30-token responses."""
    step_split: str = field(default="text:\n\n", metadata=NO_FLAG)
    """PRL's step split: one step per paragraph, as the task's solutions are written."""
    max_tokens: int = 96
    """Max response tokens in training and evaluation."""
    eval_n: int = 4
    """Samples per problem in the evaluations."""
    synth_limit: int | None = None
    """Held-out synthetic problems evaluated (None: all 400)."""
    bench_limit: int = 20
    """Problems of each benchmark evaluated (a slice: the tiny model cannot solve them; they exercise the path)."""
    benchmarks: tuple[str, ...] = field(default=BENCHMARKS, metadata=NO_FLAG)
    """Benchmarks in the evaluation slice."""
    engine: str = "vllm"
    """Generation engine for rollouts and evaluation."""
    eval_task_runner: str = "local"
    """Task runner of the evaluations: 'local' (in this process) or 'ray' (shards on a local Ray runtime)."""

    def __post_init__(self):
        self.warm_start()  # its checks, before any work starts
        rollouts = self.prompts_per_step * self.n_samples
        if self.updates_per_step < 1 or rollouts % self.updates_per_step:
            raise ConfigError(f"updates_per_step: must divide the step's {rollouts} rollouts (prompts_per_step "
                              f"{self.prompts_per_step} × n_samples {self.n_samples}), got {self.updates_per_step}")

    def warm_start(self) -> WarmStart:
        """The demo's starting model (built under ``OUT_DIR/models``)."""
        return WarmStart(sft_steps=self.sft_steps, direct_frac=self.direct_frac, sft_eval_size=self.sft_eval_size,
                         seed=self.seed)

    @property
    def store(self) -> str:
        return store_path(self.out_dir, self.db)

    def eval_datasets(self) -> tuple[str, ...]:
        synth = f"{SYNTHETIC}:{self.synth_limit}" if self.synth_limit else SYNTHETIC
        return (synth, *(f"{b}:{self.bench_limit}" for b in self.benchmarks))


def small(out_dir: str, **overrides: Any) -> PipelineConfig:
    """A seconds-scale budget for tests: the same flow, tiny numbers."""
    base = PipelineConfig(out_dir=out_dir, sft_steps=30, sft_eval_size=20, train_steps=3, prompts_per_step=4, n_samples=4,
                          eval_n=2, synth_limit=12, bench_limit=2, max_tokens=48,
                          updates_per_step=2)
    return replace(base, **overrides)
