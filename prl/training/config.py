"""Typed configuration of a training run (``configs/*.yaml``: an ``algorithm:`` and a ``train:``
section), validated up front with errors that say how to fix them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


from prl_core.config import AlgorithmConfig, ConfigError

from prl.config_files import read_yaml
from prl.data.synthetic import TRAIN_SIZE
from prl.grading.verifier import VerifierSettings
from prl.options import add_config_arguments, config_kwargs, include_fields, option
from prl.store.db import DEFAULT_STORE
from prl.training.monitors import MonitorConfig


@dataclass
@include_fields(VerifierSettings)
class TrainConfig:
    """Everything about a training run except the estimator (that is ``AlgorithmConfig``); the rollouts'
    verifier (``verifier_workers``, ``verify_timeout_s``) from ``VerifierSettings``."""

    model: str = ""
    """Starting policy (and frozen reference) directory, Hugging Face layout with a chat template."""
    out_dir: str = "runs/train"
    """Checkpoints, synced weights and the run's files go here."""
    db: str = DEFAULT_STORE
    """Store for train_metrics, prl_segments, runs and evaluation samples."""
    run_id: str | None = option(None, spelling="run")
    """Run id (default: the out_dir's name)."""
    seed: int = 0
    """Seeds data order, sampling and initialisation of everything random."""
    steps: int = 20
    """Optimizer-phase steps (each: rollouts → verify → log-probs → advantages → ppo_epochs of updates)."""
    prompts_per_step: int = 16
    """Prompts per step (the paper: 128); each gets algorithm.n_samples responses."""
    train_data: str = "synth_train"
    """'synth_train' (the synthetic task's training split) or a .jsonl/.parquet file with problem and answer."""
    train_size: int = TRAIN_SIZE
    """Problems drawn from the synthetic training split."""
    max_tokens: int = 96
    """Max response tokens per rollout (the paper: 3072)."""
    temperature: float = 1.0
    """Rollout sampling temperature (the paper: 1.0)."""
    engine: str = "vllm"
    """Rollout engine: 'vllm' (in this process on this rank's device; new weights from memory after each
    update) or 'hf' (transformers.generate)."""
    weight_sync: str = "memory"
    """How updated weights reach the rollout engine: 'memory' (handed over in this process; falls back to
    'disk' when the engine's workers run in other processes) or 'disk' (save_pretrained + reload)."""
    lr: float = 1e-5
    """Adam learning rate (the paper: 1e-6 for 1.5B)."""
    warmup_steps: int = 0
    """Linear warm-up steps of the learning rate (counted in optimizer updates)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    ppo_epochs: int = 1
    """Passes over each step's rollouts."""
    mini_batch_size: int = 16
    """Sequences per optimizer update (must divide prompts_per_step × n_samples / world size)."""
    micro_batch_size: int = 8
    """Sequences per forward/backward pass; gradient accumulation = mini / micro."""
    grad_clip: float = 1.0
    """Gradient-norm clip (0 disables)."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage 0-3."""
    dtype: str = "float32"
    """'float32' (CPU) or 'bfloat16' (GPU) for the trained policy."""
    ref_offload: bool = False
    """Keep the frozen reference model on the CPU: its forward pass then runs on the CPU, hours per step at
    1.5 B (the dry run estimates it); under ZeRO-3 the reference is partitioned over the GPUs instead."""
    ref_kl_metric: bool = True
    """Log actor/kl_ref and actor/drift (KL to the reference = the warm start) also when nothing else needs the
    reference: GRPO, Dr.GRPO and RAFT without algorithm.kl_loss_coef. false: those runs skip its forward pass."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (transformers'
    gradient checkpointing): activation memory of one layer boundary per layer, ~1.3x the update's compute."""
    logprob_chunk_tokens: int = 512
    """Response tokens whose logits (tokens x vocabulary, fp32) exist at once when log-probs and entropy are
    computed (prl_core.logprobs); never the whole batch's B x T x V. The default is
    prl_core.logprobs.DEFAULT_CHUNK_TOKENS (written out so that this module, which the CLI's options come from,
    loads without torch; tests/test_cli.py checks they are equal)."""
    max_tokens_per_micro_batch: int = 0
    """Token budget of a micro-batch (its rows x its longest sequence); 0: micro_batch_size rows each. With a
    budget a mini-batch is cut into the fewest micro-batches that fit (as many on every rank) and the loss is
    aggregated over the whole mini-batch, so the update does not depend on how it was cut."""
    rollout_memory_utilization: float = 0.3
    """GPU: the share of the device the colocated vLLM engine may take (weights, activations, KV cache:
    vLLM's gpu_memory_utilization); vLLM refuses to start when less than this share is free. Unused on CPU."""
    rollout_kv_cache_gib: float | None = None
    """The engine's KV cache in GiB (vLLM's kv_cache_memory_bytes); None: on GPUs vLLM sizes it from the share
    above, on the CPU 1 GiB."""
    rollout_max_num_batched_tokens: int | None = None
    """vLLM's max_num_batched_tokens: tokens of one engine step, and the batch of the profile pass it sizes the KV
    cache after (the memory plan takes it off the KV cache); None: vLLM's default (16,384 on an H100)."""
    rollout_max_num_seqs: int | None = None
    """vLLM's max_num_seqs: sequences in flight at once (the sampler's rows); None: vLLM's default (1,024 on an
    H100). The rank's rollouts per step (prompts_per_step x n / ranks) are enough."""
    rollout_max_model_len: int | None = None
    """vLLM's max_model_len (prompt + response tokens); None: the model's max_position_embeddings."""
    rollout_sleep_level: int = 0
    """Release the engine's memory during log-probs and the update (vLLM sleep mode): 0 off; 1 KV cache
    freed, weights moved to host memory; 2 both freed (the trainer re-sends the weights after each update).
    vLLM's CPU build takes the calls and keeps its memory."""
    checkpoint_every: int = 1
    """Save a DeepSpeed checkpoint every N steps (and at the end); resumption restarts from the last one."""
    keep_checkpoints: int = 2
    """How many recent checkpoints to keep on disk."""
    export_checkpoints: bool = True
    """At each checkpoint also write the policy as a Hugging Face directory out/exports/step_N and emit the
    Prefect event prl.checkpoint.saved (the evaluate-checkpoint deployment's trigger; sent when PREFECT_API_URL
    names a server)."""
    keep_exports: int = 0
    """How many recent checkpoint exports to keep (0: all; an export is what a triggered or nightly evaluation
    loads, so prune only what has been evaluated)."""
    eval_every: int = 0
    """Evaluate the current policy every N steps through the evaluation flow (0 = only at the end if eval_datasets)."""
    eval_datasets: tuple[str, ...] = ("synth_test",)
    """Data sets of the periodic evaluation."""
    eval_n: int = 4
    """Samples per problem in periodic evaluations."""
    eval_limit: int | None = 100
    """Problems per data set in periodic evaluations (None = all)."""
    heldout_problems: int = 32
    """At each evaluation, n_samples fresh responses to the first N problems of the first eval data set give
    heldout/entropy, heldout/drift (KL from the warm start, per response) and heldout/kl_ref (0: none)."""
    eval_k: tuple[int, ...] = ()
    """The k of the unbiased pass@k that each in-training evaluation stores as eval/pass@k (each <= eval_n; empty:
    1 and eval_n), beside eval/average (the independent task metric the monitors read)."""
    segments_per_step: int = 4
    """Rollouts per step whose per-segment S and ρ go to prl_segments."""
    dist_timeout_min: int = 60
    """Minutes a collective may wait before the process group aborts the run (DeepSpeed's and torch's groups;
    DeepSpeed's own default is 10). Other ranks wait in a barrier while rank 0 alone writes exports and
    checkpoints, deletes old ones or stores the slowest evaluation shard: at 7B on shared storage that exceeds
    10 minutes (docs/scaling.md)."""
    grad_accum_dtype: str = "fp32"
    """bf16 runs: the dtype gradients accumulate and are reduced in over a mini-batch's micro-batches
    (DeepSpeed's data_types.grad_accum_dtype): 'fp32' (4 bytes per parameter / ranks more under ZeRO-2/3, in
    the memory plan) or 'bf16' (DeepSpeed's default, 10-20 micro-batches summed in 8 bits of mantissa).
    fp32 runs accumulate in fp32 whatever this says; bf16 at ZeRO 0 in bf16 (DeepSpeed takes no other mix there)."""
    threads: int | None = 2
    """torch threads for the trainer (fixed, so that results do not depend on the machine's core count:
    docs/reproducibility.md; None: torch's default, one per core)."""

    def validate(self, algo: AlgorithmConfig, world_size: int = 1) -> None:
        def fail(name: str, msg: str) -> None:
            raise ConfigError(f"train.{name}: {msg}")

        if not self.model:
            fail("model", "give the starting model directory")
        for name in ("steps", "prompts_per_step", "max_tokens", "ppo_epochs", "mini_batch_size", "micro_batch_size",
                     "checkpoint_every", "keep_checkpoints", "eval_n", "verifier_workers", "train_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail(name, f"expected an integer >= 1, got {v!r}")
        if not isinstance(self.eval_k, tuple) or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.eval_n
                                                     for k in self.eval_k):
            fail("eval_k", f"expected integers in [1, eval_n={self.eval_n}], got {self.eval_k!r}")
        for name in ("eval_every", "warmup_steps", "segments_per_step", "keep_exports", "heldout_problems"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                fail(name, f"expected an integer >= 0, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            fail("lr", f"expected a positive number, got {self.lr!r}")
        if self.temperature <= 0:
            fail("temperature", "rollouts must be sampled (> 0); the group baseline needs differing responses")
        if self.engine not in ("vllm", "hf"):
            fail("engine", f"expected 'vllm' or 'hf', got {self.engine!r}")
        if self.weight_sync not in ("memory", "disk"):
            fail("weight_sync", f"expected 'memory' or 'disk', got {self.weight_sync!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            fail("zero_stage", f"expected 0, 1, 2 or 3, got {self.zero_stage!r}")
        if self.dtype not in ("float32", "bfloat16"):
            fail("dtype", f"expected 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.prompts_per_step % world_size:
            fail("prompts_per_step", f"{self.prompts_per_step} prompts do not shard evenly over {world_size} ranks; "
                 f"use a multiple of {world_size}")
        per_rank = self.prompts_per_step // world_size * algo.n_samples
        if per_rank % self.mini_batch_size:
            fail("mini_batch_size", f"{self.mini_batch_size} does not divide the {per_rank} rollouts per rank and step "
                 f"(prompts_per_step {self.prompts_per_step} / world size {world_size} × n_samples {algo.n_samples})")
        if self.mini_batch_size % self.micro_batch_size:
            fail("micro_batch_size", f"{self.micro_batch_size} does not divide mini_batch_size {self.mini_batch_size}")
        if isinstance(self.logprob_chunk_tokens, bool) or not isinstance(self.logprob_chunk_tokens, int) \
                or self.logprob_chunk_tokens < 1:
            fail("logprob_chunk_tokens", f"expected an integer >= 1, got {self.logprob_chunk_tokens!r}")
        budget = self.max_tokens_per_micro_batch
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            fail("max_tokens_per_micro_batch", f"expected an integer >= 0 (0: micro_batch_size rows), got {budget!r}")
        if 0 < budget <= self.max_tokens:
            fail("max_tokens_per_micro_batch", f"{budget} tokens cannot hold one response of max_tokens {self.max_tokens} "
                 "and its prompt; raise it above max_tokens plus the longest prompt, or 0 for micro_batch_size rows")
        if not isinstance(self.ref_kl_metric, bool):
            fail("ref_kl_metric", f"expected true or false, got {self.ref_kl_metric!r}")
        if not isinstance(self.gradient_checkpointing, bool):
            fail("gradient_checkpointing", f"expected true or false, got {self.gradient_checkpointing!r}")
        util = self.rollout_memory_utilization
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util < 1:
            fail("rollout_memory_utilization", f"expected a share of the device in (0, 1), got {util!r}")
        kv = self.rollout_kv_cache_gib
        if kv is not None and (isinstance(kv, bool) or not isinstance(kv, (int, float)) or not kv > 0):
            fail("rollout_kv_cache_gib", f"expected a size in GiB > 0, or null to let vLLM size it, got {kv!r}")
        if kv is not None and self.engine != "vllm":
            fail("rollout_kv_cache_gib", "only the 'vllm' engine has a KV cache pool; remove it or use engine: vllm")
        if isinstance(self.dist_timeout_min, bool) or not isinstance(self.dist_timeout_min, int) \
                or self.dist_timeout_min < 1:
            fail("dist_timeout_min", f"expected whole minutes >= 1, got {self.dist_timeout_min!r}")
        if self.grad_accum_dtype not in ("fp32", "bf16"):
            fail("grad_accum_dtype", f"expected 'fp32' or 'bf16', got {self.grad_accum_dtype!r}")
        for name in ("rollout_max_num_batched_tokens", "rollout_max_num_seqs", "rollout_max_model_len"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                fail(name, f"expected a whole number >= 1 or null (vLLM's default), got {v!r}")
            if v is not None and self.engine != "vllm":
                fail(name, "only the 'vllm' engine takes it; remove it or use engine: vllm")
        if self.rollout_max_model_len is not None and self.rollout_max_model_len <= self.max_tokens:
            fail("rollout_max_model_len", f"{self.rollout_max_model_len} leaves no room for a prompt beside "
                 f"max_tokens {self.max_tokens}")
        if self.rollout_sleep_level not in (0, 1, 2):
            fail("rollout_sleep_level", f"expected 0 (off), 1 or 2, got {self.rollout_sleep_level!r}")
        from prl_core.estimators import group_size_error  # torch: imported when a config is checked

        small = group_size_error(algo.estimator, algo.n_samples)
        if small:
            fail("n_samples", f"{small} (algorithm.n_samples)")

    def needs_reference(self, algo: AlgorithmConfig) -> bool:
        """Whether the run loads the frozen reference: its estimator reads it (PRL), a KL loss does, or actor/kl_ref is
        logged (``ref_kl_metric``)."""
        from prl_core.estimators import get_estimator

        return get_estimator(algo.estimator).uses_reference or algo.kl_loss_coef > 0 or self.ref_kl_metric

    @property
    def resolved_run_id(self) -> str:
        return self.run_id or Path(self.out_dir).resolve().name


@dataclass
class RunConfig:
    """A training config file: the algorithm and the training loop."""

    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """The estimator and its loss (prl_core.config)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The training loop."""
    monitors: MonitorConfig = field(default_factory=MonitorConfig)
    """What counts as the run going wrong and what to do then (prl.training.monitors)."""

    SECTIONS = ("algorithm", "train", "monitors")

    @classmethod
    def from_yaml(cls, path: str | Path, *, algorithm: dict[str, Any] | None = None, **overrides: Any) -> "RunConfig":
        """The file's sections with command-line ``overrides`` of train fields and ``algorithm`` ones (an
        ``estimator`` given there drops the file's estimator-specific keys that it does not read)."""
        data = read_yaml(path)
        if not isinstance(data, dict) or set(data) - set(cls.SECTIONS):
            extra = sorted(set(data) - set(cls.SECTIONS)) if isinstance(data, dict) else data
            raise ConfigError(f"{path}: expected sections 'algorithm:', 'train:' and optionally 'monitors:', "
                              f"found {extra}")
        algo_data = dict(data.get("algorithm") or {}) if isinstance(data.get("algorithm") or {}, dict) else data["algorithm"]
        given = {k: v for k, v in (algorithm or {}).items() if v is not None}
        if "estimator" in given and isinstance(algo_data, dict):
            from prl_core.estimators import ESTIMATOR_KEYS, get_estimator

            try:
                reads = set(get_estimator(given["estimator"]).keys)
            except ValueError as e:
                raise ConfigError(f"--estimator: {e}") from None
            algo_data = {k: v for k, v in algo_data.items() if k not in ESTIMATOR_KEYS or k in reads}
        if isinstance(algo_data, dict):
            algo_data.update(given)
        algo = AlgorithmConfig.from_dict(algo_data, source=f"{path} algorithm")
        train = train_from_dict({**(data.get("train") or {}), **{k: v for k, v in overrides.items() if v is not None}},
                                source=f"{path} train")
        monitors = MonitorConfig.from_dict(data.get("monitors"), source=f"{path} monitors")
        return cls(algo, train, monitors)

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm.to_dict(), "train": asdict(self.train), "monitors": self.monitors.to_dict()}


def train_from_dict(data: dict[str, Any], *, source: str = "train") -> TrainConfig:
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")
    data = dict(data)
    for name in ("eval_datasets", "eval_k"):
        if name in data and isinstance(data[name], (list, tuple)):
            data[name] = tuple(data[name])
    if "lr" in data and isinstance(data["lr"], str):
        try:
            data["lr"] = float(data["lr"])
        except ValueError:
            raise ConfigError(f"{source}: lr: expected a number, got {data['lr']!r}") from None
    return TrainConfig(**data)


OVERRIDES = ("model", "db", "run_id", "out_dir", "steps")
"""The TrainConfig fields that `prl train` and the training script take on the command line, over the
config file's (flags and help from the fields: one source for both)."""


ALGORITHM_OVERRIDES = ("estimator", "divergence", "eta", "step_split", "order", "kl_loss_coef", "kl_estimator",
                       "rollout_is", "rollout_is_cap")
"""The AlgorithmConfig fields that `prl train` takes on the command line, over the config file's algorithm section
(``--estimator`` drops the file's keys the new estimator does not read, as a study cell does)."""


def add_run_arguments(parser) -> None:
    """The options `prl train` and ``python -m prl.training.train`` share: the config file, --resume
    and the :data:`OVERRIDES` and :data:`ALGORITHM_OVERRIDES` (every default: the config file's)."""
    parser.add_argument("--config", required=True, help="YAML with algorithm:, train: and (optionally) monitors: "
                        "sections")
    add_config_arguments(parser, TrainConfig, OVERRIDES, from_file=True, aliases={"out_dir": ("--out",)})
    group = parser.add_argument_group("algorithm (over the config file's algorithm: section)")
    # no argparse choices: listing them imports torch (prl_core's registries), and `prl --help` must not; the
    # config refuses an unknown name with the list (AlgorithmConfig), and `prl train --help` ends with it
    add_config_arguments(group, AlgorithmConfig, ALGORITHM_OVERRIDES, from_file=True)
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the out directory")


def estimators_epilog() -> str:
    """The registered estimators and divergences, one line each, and the other algorithm options' values (the end
    of `prl train --help`)."""
    from prl_core.divergences import DIVERGENCES
    from prl_core.estimators import ESTIMATORS
    from prl_core.losses import KL_ESTIMATORS
    from prl_core.offpolicy import IS_MODES

    return ("estimators (--estimator):\n" + "\n".join(f"  {e.name:<14} {e.summary}" for e in ESTIMATORS.values())
            + "\n\ndivergences (--divergence, for frpo):\n"
            + "\n".join(f"  {d.name:<14} {d.reads}" for d in DIVERGENCES.values())
            + f"\n\n--kl-estimator: {', '.join(KL_ESTIMATORS)}; --rollout-is: {', '.join(IS_MODES)}\n")


def run_config_from_args(args) -> RunConfig:
    """The run's config: the file named by --config with the options given on the command line."""
    return RunConfig.from_yaml(args.config, algorithm=config_kwargs(args, AlgorithmConfig, ALGORITHM_OVERRIDES),
                               **config_kwargs(args, TrainConfig, OVERRIDES))


@dataclass
class SFTConfig:
    """Warm-start settings (defaults: ~4 minutes on 2 idle CPU cores; measured 0.47 greedy /
    0.29 sampled held-out accuracy from 0.00, the mixed-reward range RL needs)."""

    steps: int = 600
    """Optimizer steps."""
    max_minutes: float = 15.0
    """Wall-clock safety limit for the training loop (stops early, and says so, if reached)."""
    batch_size: int = 64
    """Examples per step."""
    lr: float = 2e-3
    """Peak learning rate (AdamW)."""
    warmup_steps: int = 50
    """Linear warm-up steps before cosine decay to 10% of the peak."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    train_size: int = TRAIN_SIZE
    """Distinct training problems (levels in equal shares)."""
    eval_size: int = 200
    """Held-out test problems for the before/after accuracy."""
    direct_frac: float = 0.0
    """Fraction of training solutions written without the working (just ``The answer is \\boxed{N}.``),
    as in SFT corpora that mix worked and terse answers. The warm start then often answers directly,
    which the tiny model gets wrong on multi-step problems: RL has something to learn (show the working)."""
    seed: int = 0
    """Seed for data order, initialisation-independent sampling and evaluation."""
    threads: int = 2
    """torch (and MKL/OpenMP) threads for the run, restored afterwards; 0 leaves torch's default (the
    number of cores). Fixed by default because the thread count changes the results in the last bits
    (MKL splits each matrix product's sums by thread), and those bits grow over training: measured in
    docs/reproducibility.md. 2 is what torch picks on the 2-core reference machine, so results there are
    unchanged; a machine with more cores now gets the reference machine's results (on the same CPU
    capability) instead of its own. Recorded as ``manifest.machine.torch_threads``."""

    def __post_init__(self):
        if not 0.0 <= self.direct_frac < 1.0:
            raise ConfigError(f"direct_frac: expected a fraction in [0, 1) (the share of solutions without the "
                              f"working), got {self.direct_frac}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ConfigError(f"threads: expected an integer >= 0 (0: torch's default), got {self.threads!r}")


WARM_START_BASE = "tiny"
"""Under a models directory: the tiny model the warm start starts from (its marker: ``prl_model.json``)."""
WARM_START_MODEL = "tiny-sft"
"""Under a models directory: the warm-started model (its marker: ``sft_report.json``)."""
WARM_START_MARKERS = {WARM_START_BASE: "prl_model.json", WARM_START_MODEL: "sft_report.json"}
"""The file each stage writes last: a stage whose marker exists is complete."""


@dataclass(frozen=True)
class WarmStart:
    """The embedded default's starting model, one definition for ``prl demo`` (``flows.pipeline``) and a
    study's ``warm_start:``: the tiny model built from ``seed`` (``<models>/tiny``), then warm-started by
    SFT on the synthetic task (``<models>/tiny-sft``, :class:`SFTConfig` with these settings) with a share of
    solutions written without the working, so that the warm start often answers directly and RL has a
    behaviour to learn (show the working). ``prl model sft`` runs the same SFT on any model from
    :class:`SFTConfig` (whose ``direct_frac`` defaults to 0). Built by ``prl.training.sft.warm_start``."""

    sft_steps: int = SFTConfig.steps
    """Warm-start SFT steps (~4 min on 2 cores; ``SFTConfig.steps``)."""
    direct_frac: float = 0.5
    """Share of warm-start training solutions written without the working (``SFTConfig.direct_frac``); 0 gives
    a warm start that always shows it."""
    sft_eval_size: int = SFTConfig.eval_size
    """Held-out problems the warm start is scored on, greedy before and greedy and sampled after
    (``SFTConfig.eval_size``)."""
    seed: int = 0
    """Seed of the model's initialisation and of the warm start."""

    def __post_init__(self):
        self.sft_config()  # SFTConfig's checks, before any work starts

    def sft_config(self) -> SFTConfig:
        return SFTConfig(steps=self.sft_steps, eval_size=self.sft_eval_size, seed=self.seed,
                         direct_frac=self.direct_frac)
