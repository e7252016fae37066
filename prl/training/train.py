"""PRL training (and its baselines GRPO, Dr.GRPO, RAFT) on DeepSpeed — one readable loop.

Each step, on every rank: n rollouts per prompt for the rank's prompts (the rank's own colocated
engine) → verify with Math-Verify → old-policy and frozen-reference log-probs from the trainer's own
forward pass → advantages from ``prl_core`` for the configured estimator → ``ppo_epochs`` passes of
mini-batch PPO-clip (RAFT: SFT on correct responses) through ``deepspeed.initialize`` → the new weights
into the rank's engine from memory → log to the store → checkpoint.

Departures from the paper (Yao et al. 2026, Table 6 and the authors' verl scripts):

1. Scale: the embedded default trains a 0.85 M-parameter Llama on a synthetic arithmetic task
   on CPU (fp32, gloo) with short responses; ``configs/train/paper_qwen2.5_math_*.yaml`` hold the
   paper's setting for GPUs. η must be read relative to response length (S sums over the remaining tokens).
2. Loss aggregation over gradient accumulation follows DeepSpeed: each micro-batch's loss
   (token-mean inside it) is divided by the accumulation steps, so a mini-batch update is the
   mean of its micro-batches' token-means, as in verl — not one token-mean over the whole
   mini-batch when micro-batches hold different numbers of tokens. With a token budget
   (``max_tokens_per_micro_batch``) the loss is the mini-batch's own token-mean instead.
3. The KL to the reference that is *logged* (``actor/kl_ref``) is the per-token mean of the k3
   estimator under the rollout policy (``actor/drift``: the response's summed k1, KL from the warm start);
   PRL's own KL term lives in ρ (``prl_core``), and the extra KL loss (``algorithm.kl_loss_coef``) is 0 as in
   Table 6.
4. Sampling seeds are derived per (step, prompt) with vLLM and per (step, batch) with the HF engine; a
   resumed run redoes whole steps, so with either it draws the rollouts an uninterrupted run drew (measured
   bit for bit with both: tests/faults/test_kill_chains.py).
5. With world size > 1 every rank runs its own rollout engine in its own process on its own device
   (vLLM's external launcher, as TRL's colocate mode) on its shard of the prompts (whole groups per
   rank, so group baselines are unchanged); metrics are averaged over ranks. Periodic evaluations are
   shared the same way: each rank generates a share of the problems, rank 0 stores them.

Memory (what ``prl train --dry-run`` plans, term by term): the policy's model states (ZeRO), the
reference (on the device; partitioned under ZeRO-3; on the CPU only with ``ref_offload``), the engine's
share of the device (released during the update with ``rollout_sleep_level``), activations (one layer
boundary per layer with ``gradient_checkpointing``) and one chunk of logits (``logprob_chunk_tokens``);
micro-batches are cut to their own longest sequence.

Run it as ``prl train --config FILE`` (the Prefect flow ``train`` in ``flows/train.py`` launches
this script in its own process), as ``python -m prl.training.train --config FILE`` or, for several
processes, under DeepSpeed's launcher:
``deepspeed --num_gpus 2 --module prl.training.train --config FILE`` (on CPU: ``DS_ACCELERATOR=cpu``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from prl_core.advantages import suffix_sums
from prl_core.config import ConfigError
from prl_core.estimators import compute_advantages, get_estimator
from prl_core.losses import kl_penalty, masked_mean
from prl_core.objective import surrogate_loss
from prl_core.offpolicy import rollout_is_weights
from prl_core.boundaries import parse_split, segment_bounds

from prl import log_routing
from prl.data import synthetic
from prl.data.datasets import load_dataset
from prl.evaluation.config import EvalConfig, split_spec
from prl.fault_points import fault_point
from prl.evaluation.evaluate import run_evaluation_across_ranks
from prl.generation.engines import Engine, SamplingConfig, check_model_dir, make_engine
from prl.generation.engines.base import derive_seed
from prl.grading.verifier import VerifierPool, VerifierSettings
from prl.manifest import run_manifest
from prl.store.db import Store
from prl.training import exports
from prl.training import distributed as dist
from prl.training import resume as save_resume
from prl.training.resume import CheckpointError, check_fresh_start
from prl.training.segments import split_boundaries, token_texts
from prl.training.batches import LogProbs, MicroBatch, Rollouts, micro_batch, pack, split_rows
from prl.training.config import RunConfig, TrainConfig, add_run_arguments, run_config_from_args
from prl.training.forward import response_logprobs
from prl.training.memory import PeakMeter, host_mmap_threshold
from prl.training.monitors import Alert, alerts_at, should_stop
from prl.evaluation.report import eval_metrics
from prl.training.weight_sync import policy_state_dict, weight_groups

SYNC_DIR = "policy"  # the latest policy weights as a Hugging Face directory (evaluations, the disk sync, users)
GIB = 1024 ** 3
CPU_KV_CACHE_GIB = 1.0
"""The CPU engine's KV cache when ``rollout_kv_cache_gib`` is not set (vLLM's CPU worker otherwise budgets a
share of the node's memory minus the whole process's, which goes negative beside a trainer)."""


# ─── 1. data ───────────────────────────────────────────────────────────────────────────────

def load_train_problems(train_cfg: TrainConfig) -> list[dict[str, Any]]:
    """Training problems as {problem, gold} in a fixed order (the data order is a seeded permutation)."""
    if train_cfg.train_data == "synth_train":
        return [{"problem": row["problem"], "gold": row["answer"]}
                for row in synthetic.generate("train", train_cfg.train_size, seed=train_cfg.seed)]
    problems, _ = load_dataset(train_cfg.train_data)
    return [{"problem": p.problem, "gold": p.gold_normalized} for p in problems]


def prompt_indices(n_problems: int, step: int, per_step: int, seed: int) -> list[int]:
    """Problem indices of ``step`` (0-based): consecutive slices of a per-epoch seeded permutation.

    A pure function of the step, so a resumed run continues the same data order.
    """
    out = []
    for pos in range(step * per_step, (step + 1) * per_step):
        epoch, i = divmod(pos, n_problems)
        order = list(range(n_problems))
        random.Random(f"{seed}:{epoch}").shuffle(order)
        out.append(order[i])
    return out


# ─── 2. the models and the engine of a rank ────────────────────────────────────────────────

def build_rollout_engine(train_cfg: TrainConfig, *, seed: int, device: torch.device) -> Engine:
    """The rank's rollout engine on the rank's own device, in this process, holding the starting weights.

    vLLM: ``colocate`` (vLLM's external_launcher executor: the engine core and its worker run in this
    process on ``cuda:<LOCAL_RANK>``, and join the training ranks' process group as independent data-parallel
    replicas), its memory share from the config, sleep mode when asked. transformers: the model on the device.
    """
    if train_cfg.engine == "vllm":
        kv = train_cfg.rollout_kv_cache_gib if train_cfg.rollout_kv_cache_gib is not None else (
            CPU_KV_CACHE_GIB if device.type == "cpu" else None)
        kw: dict[str, Any] = {"colocate": True, "sleep_mode": train_cfg.rollout_sleep_level > 0,
                              "gpu_memory_utilization": train_cfg.rollout_memory_utilization}
        if kv is not None:
            kw["kv_cache_memory_bytes"] = int(kv * GIB)
        for ours, vllms in (("rollout_max_num_batched_tokens", "max_num_batched_tokens"),
                            ("rollout_max_num_seqs", "max_num_seqs"), ("rollout_max_model_len", "max_model_len")):
            if getattr(train_cfg, ours) is not None:
                kw[vllms] = getattr(train_cfg, ours)
        return make_engine("vllm", train_cfg.model, dtype=train_cfg.dtype, seed=seed, **kw)
    return make_engine("hf", train_cfg.model, dtype=train_cfg.dtype, seed=seed, device=str(device))


def load_models(train_cfg: TrainConfig, cfg: RunConfig, world: int, device: torch.device, log: Callable[[str], None]):
    """The policy (a DeepSpeed engine), its LR scheduler, and the frozen reference (a module, or a ZeRO-3
    engine holding 1/world of it; None when the run does not need it: :meth:`TrainConfig.needs_reference`)."""
    import deepspeed
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if train_cfg.dtype == "bfloat16" else torch.float32
    ds = dist.ds_config(train_cfg, world)
    with_ref = train_cfg.needs_reference(cfg.algorithm)
    ref = None
    if train_cfg.ref_offload and with_ref:
        log("[train] WARNING: ref_offload: the reference runs its forward pass on the CPU, every micro-batch of "
            "every step (prl train --dry-run estimates the time); under ZeRO-3 leave it off — the reference is "
            "partitioned over the GPUs")
        ref = AutoModelForCausalLM.from_pretrained(train_cfg.model, dtype=dtype)  # before ZeRO-3's partitioned init
    zero3_init = None
    if train_cfg.zero_stage == 3:  # build the models partitioned (deepspeed.zero.Init), never whole on one rank
        from transformers.integrations import HfDeepSpeedConfig

        zero3_init = HfDeepSpeedConfig(ds)  # must stay alive while the models are built
    policy = AutoModelForCausalLM.from_pretrained(train_cfg.model, dtype=dtype)
    if train_cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    engine, _, _, scheduler = deepspeed.initialize(model=policy, config=ds,
                                                   model_parameters=[p for p in policy.parameters() if p.requires_grad])
    if with_ref and not train_cfg.ref_offload:
        ref = AutoModelForCausalLM.from_pretrained(train_cfg.model, dtype=dtype)
        if train_cfg.zero_stage == 3:
            ref = deepspeed.initialize(model=ref, config=dist.reference_ds_config(train_cfg, world))[0]
        else:
            ref.to(device)
    if ref is not None:
        ref.eval()  # (a DeepSpeed engine's eval() returns None: no chaining)
        ref.requires_grad_(False)
    del zero3_init
    return engine, scheduler, ref


# ─── 3. the trainer ────────────────────────────────────────────────────────────────────────

class Trainer:
    """One rank's training run: its DeepSpeed engine, frozen reference, rollout engine and (rank 0) the store.

    The phases of a step are methods called in order by :meth:`step`; records pass between them
    (:class:`Rollouts`, :class:`LogProbs`, ρ).
    """

    def __init__(self, cfg: RunConfig, *, log: Callable[[str], None] = print, progress: bool = True,
                 on_export: Callable[[dict[str, Any]], None] | None = None):
        """``on_export(record)``: called on rank 0 with each checkpoint export's record
        (:func:`prl.training.exports.write_record`) once the export is complete."""
        from transformers import AutoTokenizer

        self.cfg, self.algo, self.train_cfg = cfg, cfg.algorithm, cfg.train
        self.rank, self.world = dist.init_distributed(cfg.train.dist_timeout_min)
        self.train_cfg.validate(self.algo, self.world)
        self.log = log if self.rank == 0 else (lambda _m: None)
        self.on_export = on_export
        self.progress = progress and self.rank == 0
        self.run_id = self.train_cfg.resolved_run_id
        self.out = Path(self.train_cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        if self.train_cfg.threads:
            torch.set_num_threads(self.train_cfg.threads)
        torch.manual_seed(self.train_cfg.seed)
        random.seed(self.train_cfg.seed)
        check_model_dir(self.train_cfg.model)
        self.device = dist.device()
        self.meter = PeakMeter(self.device)
        self.memory = {"before_models_gib": self.meter.now_gib()}  # what the rank holds, measured (the manifest)
        if self.device.type == "cpu":  # activations in the host's memory: freed ones go back (memory.py)
            self.memory["host_mmap_threshold"] = host_mmap_threshold()
        self.tokenizer = AutoTokenizer.from_pretrained(self.train_cfg.model)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        # The engine first: on a GPU vLLM takes its share of a device the trainer has not filled yet.
        self.rollout_engine = build_rollout_engine(self.train_cfg, seed=self.train_cfg.seed + self.rank, device=self.device)
        self.memory["engine_built_gib"] = self.meter.now_gib()
        self.engine, self.scheduler, self.ref = load_models(self.train_cfg, cfg, self.world, self.device, self.log)
        self.memory["models_loaded_gib"] = self.meter.now_gib()
        self.problems = load_train_problems(self.train_cfg)
        self.estimator = get_estimator(self.algo.estimator)
        self.split = self.algo.step_split or "token"
        self.sync_mode = self._sync_mode()
        self.step_no = 0  # completed steps
        self._exported_step: int | None = None  # the step whose policy out/policy holds
        self._pending: list[tuple[int, dict[str, float], dict[str, list]]] = []  # steps since the last checkpoint
        self.pool: VerifierPool | None = None
        self.store = Store(self.train_cfg.db) if self.rank == 0 else None
        self.monitors = cfg.monitors
        self.history: list[dict[str, float]] = []  # rank 0: each finished step's metrics (evaluations merged in)
        self._alerted: set[tuple[int, str]] = set()  # (step, monitor) already fired (and stored)
        self.stopped_at: int | None = None  # the step after which a monitor stopped the run
        self.monitor_seconds = 0.0  # wall time spent in the monitors (bench/monitors.py's cost ratio)

    def _sync_mode(self) -> str:
        """'memory' or 'disk': how :meth:`sync_weights` reaches this run's engine (disk only when asked for,
        or for an engine in other processes, and then said once)."""
        if self.train_cfg.weight_sync == "memory" and self.rollout_engine.loads_from_memory:
            return "memory"
        self.log(f"[train] weight sync: disk (save_pretrained to {self.out / SYNC_DIR} and a reload every step: "
                 + ("train.weight_sync is 'disk')" if self.train_cfg.weight_sync == "disk" else
                    "the engine runs in other processes)"))
        return "disk"

    # ---- resources and the run's record ----------------------------------------------------

    def open(self) -> None:
        """The verifier workers; the run's row in the store."""
        self.pool = VerifierSettings.of(self.train_cfg).pool()
        if self.store is not None:
            self.record_run("running")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.rollout_engine is not None:
            self.rollout_engine.close()
            self.rollout_engine = None

    def record_run(self, status: str) -> None:
        """The run's row in the store: 'running' and 'finished' with its config and manifest; 'failed': only the
        status (what is stored stays; ``--resume`` continues it)."""
        if status == "failed":
            self.store.execute("set_run_status", run_id=self.run_id, status=status)
            return
        manifest = run_manifest("train", config=self.cfg.to_dict(), seed=self.train_cfg.seed)
        manifest.update(world_size=self.world, deepspeed=dist.ds_config(self.train_cfg, self.world), completed_steps=self.step_no,
                        weight_sync=self.sync_mode, rollout_engine=self.rollout_engine.info() if self.rollout_engine else None,
                        memory={**self.memory, "device": str(self.device), "peaks_resettable": self.meter.resettable})
        self.store.execute("upsert_run", run_id=self.run_id, kind="train", model=str(Path(self.train_cfg.model).resolve()),
                           status=status, config=self.cfg.to_dict(), manifest=manifest, parent_run_id=None,
                           train_step=self.step_no)

    # ---- 3a. rollouts -------------------------------------------------------------------------

    def rollout(self) -> dict[str, Any]:
        """This rank's prompts of the step and ``n_samples`` responses each."""
        idx = prompt_indices(len(self.problems), self.step_no, self.train_cfg.prompts_per_step, self.train_cfg.seed)
        per_rank = len(idx) // self.world
        mine = idx[self.rank * per_rank:(self.rank + 1) * per_rank]
        prompts = self.rollout_engine.build_prompts([self.problems[i]["problem"] for i in mine])
        sampling = SamplingConfig(n=self.algo.n_samples, temperature=self.train_cfg.temperature, top_p=1.0,
                                  max_tokens=self.train_cfg.max_tokens, seed=derive_seed(self.train_cfg.seed, "rollout", self.step_no),
                                  logprobs=True)  # compared with the trainer's own (rollout/logprob_diff_*)
        samples = self.rollout_engine.generate(prompts, sampling)
        return {"indices": mine, "samples": samples, "prompt_ids": self.rollout_engine.encode(prompts)}

    # ---- 3b. verification ------------------------------------------------------------------------

    def verify(self, generated: dict[str, Any]) -> Rollouts:
        samples = generated["samples"]
        golds = [self.problems[generated["indices"][s.prompt_index]]["gold"] for s in samples]
        verdicts = self.pool.verify([(s.text, g) for s, g in zip(samples, golds)])
        return Rollouts(**pack(generated["prompt_ids"], samples, self.pad_id),
                        group_ids=torch.tensor([s.prompt_index for s in samples], dtype=torch.long),
                        rewards=torch.tensor([v.score for v in verdicts], dtype=torch.float32),
                        texts=[s.text for s in samples], golds=golds,
                        prompt_index=[generated["indices"][s.prompt_index] for s in samples],
                        verdicts=[v.verdict for v in verdicts])

    # ---- 3c. old-policy and reference log-probs ------------------------------------------------

    def micro_batches(self, rollouts: Rollouts, rows: torch.Tensor) -> list[MicroBatch]:
        """``rows`` cut into micro-batches (:func:`prl.training.batches.split_rows`), each to its own longest
        sequence; with a token budget, as many on this rank as on the rank that needs the most."""
        budget = self.train_cfg.max_tokens_per_micro_batch
        parts = split_rows(rows, rollouts.lengths, size=self.train_cfg.micro_batch_size, budget=budget)
        if budget:
            k = dist.all_reduce_max(len(parts), self.world, self.device)
            parts = split_rows(rows, rollouts.lengths, size=self.train_cfg.micro_batch_size, budget=budget, at_least=k)
        return [micro_batch(rollouts, p) for p in parts]

    def _logprobs(self, model, mb: MicroBatch, **kw) -> tuple[torch.Tensor, torch.Tensor | None]:
        on = self.device if not (self.train_cfg.ref_offload and model is self.ref) else torch.device("cpu")
        return response_logprobs(model, mb.to(on), temperature=self.train_cfg.temperature,
                                 chunk_tokens=self.train_cfg.logprob_chunk_tokens, **kw)

    @torch.no_grad()
    def logprobs(self, rollouts: Rollouts) -> LogProbs:
        """logp_old (the current policy = the rollout policy) and logp_ref, (B, T) (no logp_ref without a
        reference)."""
        self.engine.module.eval()
        old = torch.zeros(rollouts.mask.shape)
        ref = torch.zeros(rollouts.mask.shape) if self.ref is not None else None
        for mb in self.micro_batches(rollouts, torch.arange(len(rollouts))):
            T = mb.mask.shape[1]
            old[mb.rows, :T] = self._logprobs(self.engine, mb)[0].cpu()
            if ref is not None:
                ref[mb.rows, :T] = self._logprobs(self.ref, mb)[0].cpu()
        return LogProbs(old=old, ref=ref)

    # ---- 3d. advantages -----------------------------------------------------------------------

    def boundaries(self, rollouts: Rollouts) -> torch.Tensor | None:
        """Step boundaries (B, T) for text splits (they need token texts); None otherwise."""
        if parse_split(self.split).kind != "text":
            return None
        return split_boundaries(self.tokenizer, rollouts.response_ids, rollouts.mask, self.split)

    def advantages(self, rollouts: Rollouts, logprobs: LogProbs) -> torch.Tensor:
        """ρ (B, T): each response token's weight in the policy loss from the config's estimator (PRL's
        A − S/η filled per step; GRPO / Dr.GRPO / RAFT: the outcome advantage broadcast over the response)."""
        bounds = self.boundaries(rollouts) if self.estimator.uses_steps else None
        # without a reference the estimator is one that does not read it (TrainConfig.needs_reference): it gets
        # logp_old in its place, for the shape checks
        ref = logprobs.ref if logprobs.ref is not None else logprobs.old
        return compute_advantages(self.algo, rollouts.rewards, rollouts.group_ids, logprobs.old, ref, rollouts.mask,
                                  bounds)

    # ---- 3e. policy update -------------------------------------------------------------------

    def update(self, rollouts: Rollouts, logprobs: LogProbs, rho: torch.Tensor) -> dict[str, float]:
        """``ppo_epochs`` passes of mini-batch updates; returns loss metrics and grad norm, means over updates."""
        self.engine.module.train()
        gen = torch.Generator().manual_seed(self.train_cfg.seed * 1_000_003 + self.step_no)
        budget = self.train_cfg.max_tokens_per_micro_batch
        sums: dict[str, float] = {}
        count, grad_norms = 0, []
        for _ in range(self.train_cfg.ppo_epochs):
            for mini in torch.randperm(len(rollouts), generator=gen).split(self.train_cfg.mini_batch_size):
                micros = self.micro_batches(rollouts, mini)
                norm = self._mini_batch_norm(rollouts, mini) if budget else None
                for i, mb in enumerate(micros):
                    if budget:  # the boundary is the last of this mini-batch's micro-batches, however many
                        self.engine.set_gradient_accumulation_boundary(i == len(micros) - 1)
                    metrics, loss = self._micro_loss(mb, logprobs, rho, norm)
                    boundary = self.engine.is_gradient_accumulation_boundary()
                    self.engine.backward(loss, scale_wrt_gas=not budget)
                    local_norm = _grad_norm(self.engine.module) if boundary else None  # averaged grads, pre-clip
                    self.engine.step()
                    if boundary:  # ZeRO 1-3 and bf16 report the norm; fp32 ZeRO 0 clips without keeping it
                        gn = self.engine.get_global_grad_norm()
                        grad_norms.append(float(gn) if gn is not None else local_norm)
                    for k, v in metrics.items():
                        sums[k] = sums.get(k, 0.0) + float(v)
                    count += 1
        out = {k: v / count for k, v in sums.items()}
        out["actor/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")  # mean over updates
        out["actor/lr"] = float(self.scheduler.get_last_lr()[0]) if self.scheduler is not None else self.train_cfg.lr
        return out

    def _mini_batch_norm(self, rollouts: Rollouts, mini: torch.Tensor) -> float:
        """The mini-batch's count that its micro-batches' losses are divided by (token-mean: response tokens;
        seq-mean-token-mean: responses with a token; RAFT: the selected responses' tokens)."""
        mask = rollouts.mask[mini]
        if self.estimator.loss == "sft":
            mask = mask & (rollouts.rewards[mini] > 0).unsqueeze(1)
        n = mask.sum() if self.algo.loss_agg == "token-mean" else (mask.sum(1) > 0).sum()
        return max(float(n), 1.0)

    def _micro_loss(self, mb: MicroBatch, logprobs: LogProbs, rho: torch.Tensor, norm: float | None
                    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The estimator's surrogate on one micro-batch (:func:`prl_core.objective.surrogate_loss`: the policy
        term weighted by the off-policy correction, the divergence's local term, the loss-side KL)."""
        T = mb.mask.shape[1]
        logp, entropy = self._logprobs(self.engine, mb, entropy=True)
        old, advantage = (x[mb.rows, :T].to(self.device) for x in (logprobs.old, rho))
        ref = logprobs.ref[mb.rows, :T].to(self.device) if logprobs.ref is not None else None
        w = logprobs.is_weights[mb.rows, :T].to(self.device) if logprobs.is_weights is not None else None
        loss, metrics = surrogate_loss(self.algo, logp, old, ref, advantage, mb.mask.to(self.device),
                                       entropy=entropy, norm=norm, is_weights=w)
        return metrics, loss

    # ---- 3f. the engine's memory around the update, and the weight sync -----------------------

    def release_engine(self) -> None:
        """Sleep mode: the engine gives its memory back for log-probs and the update."""
        if self.train_cfg.rollout_sleep_level:
            self.rollout_engine.sleep(self.train_cfg.rollout_sleep_level)

    def sync_weights(self) -> None:
        """The updated policy into this rank's engine, and the engine awake for the next rollouts.

        From memory (``train.weight_sync: memory``): the policy's tensors go to the engine layer by layer
        (:func:`prl.training.weight_sync.weight_groups`: ZeRO-3 gathers one group at a time), nothing is
        written. From disk (asked for, or an engine in other processes): rank 0 writes ``out/policy`` and
        every engine reloads it. Sleep mode: the weights wake first, then the KV cache, after the sync.
        """
        engine = self.rollout_engine
        if self.train_cfg.rollout_sleep_level:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # the update's freed blocks back to the device, for the engine
            engine.wake_up(["weights"])
        if self.sync_mode == "memory":
            engine.load_weight_groups(weight_groups(self.engine.module, self.train_cfg.zero_stage))
        else:
            self.export_policy(force=True)
            engine.update_weights(self.out / SYNC_DIR)
        if self.train_cfg.rollout_sleep_level:
            engine.wake_up(["kv_cache"])

    def export_policy(self, *, force: bool = False) -> Path:
        """Write the current policy to ``out/policy`` (rank 0; every rank must call it: ZeRO-3 gathers, and
        a barrier), as evaluations, the disk sync and users load it. Skipped if this step's is there."""
        target = self.out / SYNC_DIR
        if force or self._exported_step != self.step_no or not (target / "config.json").is_file():
            weights = policy_state_dict(self.engine, self.train_cfg.zero_stage)  # every rank: ZeRO-3 gathers
            if self.rank == 0:
                exports.save_policy(self.engine.module, self.tokenizer, target, weights)
            del weights
            dist.barrier(self.world)
            self._exported_step = self.step_no
        return target

    # ---- 3g. diagnostics -------------------------------------------------------------------------

    def diagnostics(self, rollouts: Rollouts, logprobs: LogProbs, rho: torch.Tensor) -> dict[str, float]:
        mask = rollouts.mask
        groups: dict[int, list[float]] = {}
        for g, rew in zip(rollouts.group_ids.tolist(), rollouts.rewards.tolist()):
            groups.setdefault(g, []).append(rew)
        on_response = rho[mask]
        verdicts = {f"verify/{v}_frac": sum(x == v for x in rollouts.verdicts) / max(1, len(rollouts.verdicts))
                    for v in ("no_answer", "timeout", "error")}
        # The engine sampled from the weights it holds; the trainer recomputes them from its own. Equal up to
        # kernel numerics when the weight sync delivered the update (a stale engine shows as a gap).
        gap = (rollouts.rollout_logp - logprobs.old).abs()[mask]
        kl: dict[str, float] = {}
        if logprobs.ref is not None:
            # the reference is the warm start (train.model): actor/kl_ref per token (k3, the loss-side convention),
            # actor/drift per response (k1 summed: an unbiased estimate of the sequence KL(π ‖ π_0))
            k3 = kl_penalty(logprobs.old, logprobs.ref, "k3")
            k1 = torch.where(mask, logprobs.old - logprobs.ref, 0.0)
            kl = {"actor/kl_ref": float(masked_mean(k3, mask)), "actor/kl_ref_seq": float((k3 * mask).sum(1).mean()),
                  "actor/drift": float(k1.sum(1).mean())}
        return {**verdicts, **kl,
                "reward/mean": float(rollouts.rewards.mean()),
                "reward/accuracy": float((rollouts.rewards >= 1.0).float().mean()),
                "reward/all_equal_group_frac": sum(len(set(v)) == 1 for v in groups.values()) / max(1, len(groups)),
                "response/length": float(mask.sum(1).float().mean()),
                "response/clipped_frac": float((mask.sum(1) >= self.train_cfg.max_tokens).float().mean()),
                "prl/rho_mean": float(on_response.mean()) if on_response.numel() else float("nan"),
                "prl/rho_std": float(on_response.std()) if on_response.numel() > 1 else float("nan"),
                "rollout/logprob_diff_max": float(gap.max()) if gap.numel() else float("nan"),
                "rollout/logprob_diff_mean": float(gap.mean()) if gap.numel() else float("nan"),
                }

    def segments(self, rollouts: Rollouts, logprobs: LogProbs, rho: torch.Tensor) -> list[dict[str, Any]]:
        """Per-segment rows (bounds, S at the boundary, ρ) for the first ``segments_per_step`` rollouts."""
        k = min(self.train_cfg.segments_per_step, len(rollouts))
        if k == 0:
            return []
        mask = rollouts.mask[:k]
        split = self.split if self.estimator.uses_steps else "token"
        bounds = split_boundaries(self.tokenizer, rollouts.response_ids[:k], mask, split)
        S = suffix_sums((logprobs.old[:k] - logprobs.ref[:k]).double(), mask) if logprobs.ref is not None else None
        return [{"run_id": self.run_id, "step": self.step_no, "rollout_idx": i, "segment_idx": j,
                 "start_tok": start, "end_tok": end, "kl_to_go": float(S[i, end]) if S is not None else None,
                 "rho": float(rho[i, end])}
                for i in range(k) for j, (start, end) in enumerate(segment_bounds(bounds[i]))]

    def inspected_rollouts(self, rollouts: Rollouts) -> list[dict[str, Any]]:
        """The rollouts whose segments are logged, with each response token's text (for the dashboard)."""
        k = min(self.train_cfg.segments_per_step, len(rollouts))
        return [{"run_id": self.run_id, "step": self.step_no, "rollout_idx": i,
                 "problem": self.problems[rollouts.prompt_index[i]]["problem"], "gold": rollouts.golds[i],
                 "response": rollouts.texts[i],
                 "reward": float(rollouts.rewards[i]),
                 "tokens": token_texts(self.tokenizer, rollouts.response_ids[i][rollouts.mask[i]])}
                for i in range(k)]

    # ---- 3h. one step ----------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One full step; returns the metrics written for it (each phase's time and peak memory among them)."""
        peaks: dict[str, float] = {}
        meter = self.meter
        fault_point("train/step_start", lambda: f"{self.run_id}/{self.step_no + 1}")
        start = time.perf_counter()
        meter.start()
        generated = self.rollout()
        peaks["rollout"] = meter.peak_gib()
        generated_at = time.perf_counter()
        self.release_engine()
        rollouts = self.verify(generated)
        verified_at = time.perf_counter()
        meter.start()
        logprobs = self.logprobs(rollouts)
        peaks["logprobs"] = meter.peak_gib()
        logprobs_at = time.perf_counter()
        # the engine sampled from μ (its own weights and kernels), the update starts from π_old: weight by π_old/μ
        logprobs.is_weights, is_metrics = rollout_is_weights(
            logprobs.old, rollouts.rollout_logp, rollouts.mask, mode=self.algo.rollout_is,
            level=self.algo.rollout_is_level, cap=self.algo.rollout_is_cap)
        is_metrics["time/offpolicy"] = time.perf_counter() - logprobs_at  # the weights (their use: in the update)
        rho = self.advantages(rollouts, logprobs)
        metrics = {**self.diagnostics(rollouts, logprobs, rho), **is_metrics}
        meter.start()
        metrics.update(self.update(rollouts, logprobs, rho))
        peaks["update"] = meter.peak_gib()
        updated_at = time.perf_counter()
        meter.start()
        self.sync_weights()
        peaks["sync"] = meter.peak_gib()
        synced_at = time.perf_counter()
        metrics.update({"time/generate": generated_at - start, "time/verify": verified_at - generated_at,
                        "time/logprobs": logprobs_at - verified_at, "time/update": updated_at - logprobs_at,
                        "time/sync": synced_at - updated_at, "time/step": synced_at - start})
        metrics.update({f"memory/{phase}_peak_gib": v for phase, v in peaks.items()})
        metrics["memory/held_gib"] = meter.now_gib()  # what stays between steps: states, reference, the engine
        outside = meter.outside_allocator_gib()
        if outside is not None:
            metrics["memory/outside_allocator_gib"] = outside
        metrics = dist.all_reduce_mean(metrics, self.world, self.device)
        self.step_no += 1
        segs = ({"segments": self.segments(rollouts, logprobs, rho), "rollouts": self.inspected_rollouts(rollouts)}
                if self.rank == 0 else {})
        fault_point("train/update_done", lambda: f"{self.run_id}/{self.step_no}")
        self.finish_step(metrics, segs)
        return metrics

    # ---- 3i. log + checkpoint (in this order: a step is finished once its checkpoint exists) ------

    def finish_step(self, metrics: dict[str, float], segs: dict[str, list[dict[str, Any]]]) -> None:
        step = self.step_no
        self._pending.append((step, metrics, segs))
        if step % self.train_cfg.checkpoint_every == 0 or step == self.train_cfg.steps:
            self.save_checkpoint()
            fault_point("train/checkpoint_saved", lambda: f"{self.run_id}/{step}")
            if self.train_cfg.export_checkpoints:
                self.export_checkpoint()
        if self.store is not None:
            self.write_metrics(step, metrics, segs)

    def write_metrics(self, step: int, metrics: dict[str, float], segs: dict[str, list[dict[str, Any]]]) -> None:
        rows = [{"run_id": self.run_id, "step": step, "name": k, "value": (None if v != v else float(v))}
                for k, v in sorted(metrics.items())]
        with self.store.write() as con:  # one transaction: a step's rows are all stored or none
            self.store.insert_rows("train_metrics", rows, con)
            self.store.insert_rows("prl_segments", segs.get("segments", []), con)
            self.store.insert_rows("train_rollouts", segs.get("rollouts", []), con)
            con.execute(self.store.q["set_run_progress"], {"run_id": self.run_id, "train_step": step})
            fault_point("train/store_write", lambda: f"{self.run_id}/{step}")

    def save_checkpoint(self) -> None:
        state = {"step": self.step_no, "pending": self._pending, "torch_rng": torch.get_rng_state(),
                 "python_rng": random.getstate()}
        save_resume.save(self.engine, self.out, self.step_no, state, keep=self.train_cfg.keep_checkpoints, rank=self.rank,
                         fault_key=f"{self.run_id}/{self.step_no}")
        self._pending = []

    def export_checkpoint(self) -> Path:
        """The checkpoint's policy as a Hugging Face directory ``out/exports/step_N`` (what vLLM and the
        ``evaluate-checkpoint`` deployment load) with its record, reported to ``on_export``."""
        target = exports.export_dir(self.out, self.step_no)
        weights = policy_state_dict(self.engine, self.train_cfg.zero_stage)  # every rank: ZeRO-3 gathers
        if self.rank == 0:
            exports.save_policy(self.engine.module, self.tokenizer, target, weights)
        del weights
        dist.barrier(self.world)
        if self.rank == 0:
            record = exports.write_record(target, run_id=self.run_id, step=self.step_no, db=self.train_cfg.db, evaluation={
                "datasets": list(self.train_cfg.eval_datasets), "n": self.train_cfg.eval_n, "limit": self.train_cfg.eval_limit,
                "max_tokens": self.train_cfg.max_tokens, "engine": self.train_cfg.engine, "seed": self.train_cfg.seed})
            self.log(f"[train] step {self.step_no}: export {target} (fingerprint {record['fingerprint']})")
            if self.on_export is not None:
                self.on_export(record)
            if self.train_cfg.keep_exports:
                for old in sorted((self.out / exports.EXPORTS_DIR).glob("step_*"))[: -self.train_cfg.keep_exports]:
                    shutil.rmtree(old, ignore_errors=True)
        return target

    def resume(self) -> bool:
        """Load the latest readable checkpoint (model, optimizer, scheduler, RNG, step) and hand its weights to
        the engine. False if there is none (its rows in the store are dropped: the run starts over)."""
        loaded = save_resume.load(self.engine, self.out, self.log)
        if loaded is None:  # killed before its first checkpoint: start over, dropping its rows
            self._drop_rows_after(0)
            return False
        path, state = loaded
        self.step_no = int(state["step"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        if self.store is not None:
            # Steps after the checkpoint never finished: drop their rows; re-write the checkpointed
            # steps' rows in case the process died between the checkpoint and the store write.
            self._drop_rows_after(self.step_no)
            for step, metrics, segs in state.get("pending", []):
                self.write_metrics(step, metrics, segs)
            self.load_history()
        self.sync_weights()  # the engine started from train.model; give it the checkpoint's policy
        self.log(f"[train] resumed {self.run_id} from {path} after step {self.step_no}")
        if self.train_cfg.export_checkpoints and self._on_rank0(lambda: not (
                exports.export_dir(self.out, self.step_no) / exports.EXPORT_RECORD).is_file()):
            self.export_checkpoint()  # killed between the checkpoint and its export: the export is the checkpoint's
        return True

    def _on_rank0(self, question: Callable[[], bool]) -> bool:
        """Rank 0's answer to ``question`` on every rank (a decision every rank must take the same way)."""
        return bool(dist.broadcast(question() if self.rank == 0 else None, self.world))

    def _evaluation_due(self) -> bool:
        """Whether the step just finished is a periodic evaluation step whose evaluation is not stored as finished,
        or whose ``eval/…`` and ``heldout/…`` metrics are not stored yet (after a resume: the run was killed after
        that step's checkpoint, before, during or just after its evaluation). Evaluating again resumes a finished
        evaluation run without generating anything, then measures the held-out diagnostics with the checkpoint's
        weights, so the step's metrics are those of an uninterrupted run."""
        t = self.train_cfg
        if not (t.eval_datasets and t.eval_every and self.step_no % t.eval_every == 0 and 0 < self.step_no < t.steps):
            return False

        def unfinished() -> bool:
            run = self.store.records("get_run", run_id=exports.eval_run_id(self.run_id, self.step_no))
            recorded = 0 < self.step_no <= len(self.history) and "eval/average" in self.history[self.step_no - 1]
            return not run or run[0]["status"] != "finished" or not recorded
        return self._on_rank0(unfinished)

    def _drop_rows_after(self, step: int) -> None:
        if self.store is None:
            return
        with self.store.write() as con:
            for q in ("delete_train_metrics_after", "delete_segments_after", "delete_rollouts_after", "delete_alerts_after"):
                con.execute(self.store.q[q], {"run_id": self.run_id, "step": step})

    # ---- 3j. evaluation of the current policy, shared by the ranks ---------------------------------

    def evaluate(self) -> dict[str, Any] | None:
        """Evaluate the current policy through the evaluation path: every rank's engine generates and verifies
        a share of the problems, rank 0 stores them (:func:`prl.evaluation.evaluate.run_evaluation_across_ranks`).
        The run records ``out/policy`` (or this step's export): the weights the engines hold."""
        if not self.train_cfg.eval_datasets:
            return None
        self.export_policy()  # the evaluation records (and a user reloads) the weights it evaluated
        # the step's checkpoint export when there is one: the same model (path and fingerprint) that the
        # evaluate-checkpoint deployment evaluates for this step, so both resume one run, never make two
        export = exports.export_dir(self.out, self.step_no)
        model = export if (export / exports.EXPORT_RECORD).is_file() else self.out / SYNC_DIR
        cfg = EvalConfig(model=str(model), datasets=tuple(self.train_cfg.eval_datasets), n=self.train_cfg.eval_n,
                         db=self.train_cfg.db, run_id=exports.eval_run_id(self.run_id, self.step_no), engine=self.train_cfg.engine,
                         limit=self.train_cfg.eval_limit, max_tokens=self.train_cfg.max_tokens, temperature=1.0, seed=self.train_cfg.seed,
                         dtype=self.train_cfg.dtype, **asdict(VerifierSettings.of(self.train_cfg)), parent_run_id=self.run_id,
                         train_step=self.step_no)
        summary = run_evaluation_across_ranks(cfg, engine=self.rollout_engine, pool=self.pool, rank=self.rank,
                                              world=self.world, share=lambda obj: dist.broadcast(obj, self.world),
                                              gather=lambda obj: dist.gather(obj, self.world), log=self.log)
        heldout = self.heldout_diagnostics()
        if self.store is not None:
            self.record_evaluation(self.step_no, heldout)
        return summary

    @torch.no_grad()
    def heldout_diagnostics(self) -> dict[str, float]:
        """The current policy on held-out prompts (``train.heldout_problems`` of the first eval data set, this
        rank's share, ``n_samples`` fresh responses each): ``heldout/entropy`` (mean per response token),
        ``heldout/drift`` (Σ_t log π/π_0 per response: an unbiased estimate of the sequence KL(π ‖ π_0) from the
        warm start, which is the reference) and ``heldout/kl_ref`` (k3 per token), averaged over ranks."""
        t = self.train_cfg
        if not (t.heldout_problems and t.eval_datasets):
            return {}
        problems, _ = load_dataset(split_spec(t.eval_datasets[0])[0])  # 'synth_test:6': the data set, not its limit
        problems = problems[:t.heldout_problems]
        mine = problems[self.rank::self.world]
        prompts = self.rollout_engine.build_prompts([p.problem for p in mine])
        sampling = SamplingConfig(n=self.algo.n_samples, temperature=t.temperature, top_p=1.0, max_tokens=t.max_tokens,
                                  seed=derive_seed(t.seed, "heldout", self.step_no), logprobs=True)
        samples = self.rollout_engine.generate(prompts, sampling)
        rollouts = Rollouts(**pack(self.rollout_engine.encode(prompts), samples, self.pad_id),
                            group_ids=torch.tensor([s.prompt_index for s in samples], dtype=torch.long),
                            rewards=torch.zeros(len(samples)), texts=[s.text for s in samples], golds=[""] * len(samples),
                            prompt_index=[s.prompt_index for s in samples], verdicts=[""] * len(samples))
        self.engine.module.eval()
        tokens = ent_sum = k3_sum = drift_sum = 0.0
        for mb in self.micro_batches(rollouts, torch.arange(len(rollouts))):
            logp, ent = self._logprobs(self.engine, mb, entropy=True)
            mask = mb.mask.to(logp.device)
            tokens += float(mask.sum())
            ent_sum += float((ent * mask).sum())
            if self.ref is not None:
                ref = self._logprobs(self.ref, mb)[0].to(logp.device)
                k3_sum += float((kl_penalty(logp, ref, "k3") * mask).sum())
                drift_sum += float(torch.where(mask, logp - ref, 0.0).sum())
        out = {"heldout/entropy": ent_sum / max(tokens, 1.0)}
        if self.ref is not None:
            out.update({"heldout/kl_ref": k3_sum / max(tokens, 1.0), "heldout/drift": drift_sum / max(len(rollouts), 1)})
        return dist.all_reduce_mean(out, self.world, self.device)

    EVALUATION_METRICS = ("eval/", "heldout/")
    """The prefixes of the train metrics :meth:`record_evaluation` writes: a step's evaluation, stored after the
    step's own metrics (a run killed between them resumes by evaluating that step again)."""

    def record_evaluation(self, step: int, extra: dict[str, float] | None = None) -> dict[str, float]:
        """The evaluation of ``step``'s policy as that step's ``eval/…`` train metrics (unbiased pass@k for
        ``train.eval_k``, the average: :func:`prl.evaluation.report.eval_metrics`, the figures ``prl report``
        gives the eval run), merged into the monitors' history. Rank 0."""
        m = {**eval_metrics(self.store, exports.eval_run_id(self.run_id, step), self.train_cfg.eval_k), **(extra or {})}
        self.store.insert_rows("train_metrics", [{"run_id": self.run_id, "step": step, "name": k, "value": v}
                                                 for k, v in sorted(m.items())])
        if 0 < step <= len(self.history):
            self.history[step - 1].update(m)
        return m

    # ---- 3l. the monitors: alerts at the onsets of a run going wrong ----------------------------------

    def load_history(self) -> None:
        """Rank 0, on resume: the monitors' history of the finished steps from the store and the alerts already
        stored. (An evaluation whose metrics were not stored yet is the checkpoint's own: :meth:`_evaluation_due`
        and the final evaluation record it, with its held-out diagnostics.)"""
        if self.store is None:
            return
        rows = self.store.records("train_metrics_for_runs", run_ids=[self.run_id])
        by_step: dict[int, dict[str, float]] = {}
        for r in rows:
            if r["step"] <= self.step_no:
                by_step.setdefault(r["step"], {})[r["name"]] = float("nan") if r["value"] is None else r["value"]
        self.history = [by_step.get(i, {}) for i in range(1, self.step_no + 1)]
        self._alerted = {(a["step"], a["monitor"]) for a in self.store.records("alerts_for_runs", run_ids=[self.run_id])}

    def watch(self) -> bool:
        """Run the monitors on the step just finished (and its evaluation); log and store what fired. True (on
        every rank) when the run should stop (``monitors.on_alert: stop``, or a non-finite metric)."""
        def decide() -> bool:
            start = time.perf_counter()
            fired = [a for a in alerts_at(self.history, self.step_no, self.monitors)
                     if (a.step, a.monitor) not in self._alerted]
            stop = should_stop(fired, self.monitors) and self.step_no < self.train_cfg.steps
            self.store_alerts(fired, "stop" if stop else "warn")
            self.monitor_seconds += time.perf_counter() - start
            return stop
        return self._on_rank0(decide)

    def store_alerts(self, fired: list[Alert], action: str) -> None:
        for a in fired:
            self.log(a.line() + (" — stopping after this step's checkpoint" if action == "stop" else ""))
            self._alerted.add((a.step, a.monitor))
        self.store.insert_rows("train_alerts", [a.row(self.run_id, action) for a in fired])

    def stop(self) -> None:
        """A monitor's clean stop: this step checkpointed (and exported), out/policy written, the run 'stopped'
        (``--resume`` continues it)."""
        if self._pending:
            self.save_checkpoint()
            if self.train_cfg.export_checkpoints:
                self.export_checkpoint()
        self.export_policy()
        self.stopped_at = self.step_no
        self.log(f"[train] stopped after step {self.step_no} by its monitors (monitors.on_alert: "
                 f"{self.monitors.on_alert}); the alerts: prl sql \"select * from train_alerts where run_id = "
                 f"'{self.run_id}'\"")

    # ---- 3k. the loop ---------------------------------------------------------------------------------

    def run(self, *, resume: bool = False) -> dict[str, Any]:
        resumed_from = None
        self.open()
        try:
            if resume and self.resume():
                resumed_from = self.step_no
                if self._evaluation_due():  # the checkpoint's own evaluation, which the loop below would skip
                    self.evaluate()
            elif not resume:
                check_fresh_start(self.train_cfg)
            bar = tqdm(total=self.train_cfg.steps, initial=self.step_no, desc=f"train {self.run_id}", unit="step",
                       disable=not self.progress, file=sys.stderr)
            while self.step_no < self.train_cfg.steps:
                metrics = self.step()
                if self.rank == 0:
                    self.history.append(dict(metrics))
                bar.update(1)
                self.log(summary_line(self.step_no, metrics))
                if self.train_cfg.eval_every and self.step_no % self.train_cfg.eval_every == 0 and self.step_no < self.train_cfg.steps:
                    self.evaluate()
                if self.step_no < self.train_cfg.steps and self.watch():
                    self.stop()
                    break
            bar.close()
            final_eval = None
            if self.stopped_at is None:
                self.export_policy()  # out/policy: the trained model, whichever way the steps were synced
                final_eval = self.evaluate() if self.train_cfg.eval_datasets else None
                if self.step_no >= 1:
                    self.watch()  # the last step, with its evaluation (a warning: nothing is left to stop)
            if self.store is not None:
                self.record_run("stopped" if self.stopped_at is not None else "finished")
            return {"run_id": self.run_id, "steps": self.step_no, "resumed_from_step": resumed_from,
                    "db": self.train_cfg.db, "out_dir": str(self.out), "final_eval": final_eval,
                    "stopped_at_step": self.stopped_at, "monitor_seconds": self.monitor_seconds}
        except BaseException:
            if self.store is not None:
                self.record_run("failed")
            raise
        finally:
            self.close()


def summary_line(step: int, metrics: dict[str, float]) -> str:
    m = metrics
    return (f"[train] step {step}: reward {m['reward/mean']:.3f}, len {m['response/length']:.0f}, "
            f"kl_ref {m.get('actor/kl_ref', float('nan')):.4f}, rho {m['prl/rho_mean']:+.3f}±{m['prl/rho_std']:.3f}, "
            f"clip {m.get('actor/clipfrac', float('nan')):.3f}, loss {m['actor/loss']:+.4f}, "
            f"gn {m['actor/grad_norm']:.3f}, {m['time/step']:.1f} s "
            f"(gen {m['time/generate']:.1f}, ver {m['time/verify']:.1f}, lp {m['time/logprobs']:.1f}, "
            f"upd {m['time/update']:.1f})")


def _grad_norm(model) -> float:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return float("nan")
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


# ─── 4. command line (the launcher path; `prl train` runs the Prefect flow) ─────────────────────

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prl.training.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)  # the same options as `prl train` (prl.training.config)
    ap.add_argument("--quiet", "-q", "--no-progress", dest="no_progress", action="store_true",
                    help="no progress bar (the CLI's --quiet; --no-progress is its older spelling)")
    ap.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # set by the deepspeed launcher
    args = ap.parse_args(argv)
    log_routing.configure_from_env()  # launched by `prl demo`/`prl train`: library messages into their log file
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    cfg = run_config_from_args(args)
    stdout = sys.stdout

    def announce(record: dict[str, Any]) -> None:  # to the launcher (the train flow emits the Prefect event)
        print(exports.announcement(record), file=stdout, flush=True)

    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only export announcements and the final JSON line
        trainer = Trainer(cfg, log=lambda m: print(m, file=sys.stderr, flush=True), progress=not args.no_progress,
                          on_export=announce)
        try:
            result = trainer.run(resume=args.resume)
        except (CheckpointError, ConfigError) as e:  # one line for the launcher's log, no traceback
            print(f"error: {e}", file=sys.stderr, flush=True)
            return 2
    if trainer.rank == 0:
        print(json.dumps(result, default=str), flush=True)
    if torch.distributed.is_initialized():
        # the ranks leave together: rank 0 may still be writing the result above while the others are done.
        # The group is still up: vLLM's external launcher joined it, and closing the engine (VLLMEngine.close)
        # shuts its engine core down without vLLM's destroy_distributed_environment.
        torch.distributed.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
