"""PRL training (and its baselines GRPO, Dr.GRPO, RAFT) on DeepSpeed — one readable module.

Each step: sample a prompt batch → n rollouts per prompt (vLLM, weights reloaded in place after
every update; or transformers) → verify with Math-Verify → recompute old-policy and frozen-
reference log-probs with the trainer's own forward pass → advantages from ``prl_core`` for the
configured estimator → ``ppo_epochs`` passes of mini-batch PPO-clip (RAFT: SFT on correct
responses) through ``deepspeed.initialize`` → log to the store → checkpoint.

Departures from the paper (Yao et al. 2026, Table 6 and the authors' verl scripts):

1. Scale: the embedded default trains a 0.85 M-parameter Llama on a synthetic arithmetic task
   on CPU (fp32, gloo) with short responses; ``configs/paper_qwen2.5_math_1.5b.yaml`` holds the
   paper's setting for GPUs. η must be read relative to response length (DESIGN §5).
2. Loss aggregation over gradient accumulation follows DeepSpeed: each micro-batch's loss
   (token-mean inside it) is divided by the accumulation steps, so a mini-batch update is the
   mean of its micro-batches' token-means, as in verl — not one token-mean over the whole
   mini-batch when micro-batches hold different numbers of tokens.
3. The KL to the reference that is *logged* (``kl/ref``) is the per-token mean of the k3
   estimator under the rollout policy; PRL's own KL term lives in ρ (``prl_core``), and the
   extra KL loss (``algorithm.kl_loss_coef``) is 0 as in Table 6.
4. Sampling seeds are derived per (step, rank, prompt): a resumed run draws the rollouts an
   uninterrupted run would have drawn (vLLM); the HF engine is only reproducible per batch.
5. With world size > 1 every rank runs its own rollout engine on its shard of the prompts
   (whole groups per rank, so group baselines are unchanged); metrics are averaged over ranks.

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
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from prl_core.advantages import suffix_sums
from prl_core.config import ConfigError
from prl_core.estimators import compute_advantages, get_estimator
from prl_core.losses import kl_penalty, masked_mean, ppo_clip_loss, sft_loss, token_entropy
from prl_core.steps import parse_split, step_boundaries

from prl import logs
from prl.data import synthetic as task
from prl.data.datasets import load_dataset
from prl.evaluation.config import EvalConfig
from prl.evaluation.evaluate import run_evaluation
from prl.generation.engines import SamplingConfig, check_model_dir, make_engine
from prl.generation.engines.base import derive_seed
from prl.grading.verifier import VerifierPool
from prl.manifest import run_manifest
from prl.store.db import Store
from prl.training import checkpoints as ckpt
from prl.training.config import RunConfig, TrainConfig, add_run_arguments, run_config_from_args


class CheckpointError(RuntimeError):
    """A checkpoint could not be written; the message names it and how to continue."""

CHECKPOINT_DIR = "checkpoints"
SYNC_DIR = "policy"  # the latest policy weights, as the rollout engine and evaluations load them


# ─── 1. distributed setup ──────────────────────────────────────────────────────────────────

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def without_cpu_shm_comm_op() -> None:
    """Make DeepSpeed's CPU backend use plain gloo instead of its shared-memory all-reduce op.

    That op is C++ that torch JIT-builds under a lock file in ``TORCH_EXTENSIONS_DIR`` at every
    process start (ninja runs even when nothing changed). A run killed in that window leaves the lock
    behind and every later run on the machine waits on it forever (found by the kill chains: a CI run
    hung until its time limit). gloo does the same collectives; the op only speeds up multi-process
    all-reduce on CPU, and costs a ~60 s compile on first use. Call before DeepSpeed starts its backend.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # DeepSpeed keeps this one dict


def init_distributed() -> tuple[int, int]:
    """Start (or join) the process group DeepSpeed uses; returns (rank, world size).

    Single-process runs get the environment DeepSpeed expects (it otherwise tries MPI).
    """
    import deepspeed

    on_gpu = torch.cuda.is_available()
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if on_gpu else "cpu")
    if not on_gpu:
        without_cpu_shm_comm_op()
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def ds_config(t: TrainConfig, world_size: int) -> dict[str, Any]:
    """The DeepSpeed config implied by the training config."""
    cfg = {
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.mini_batch_size // t.micro_batch_size,
        "train_batch_size": t.mini_batch_size * world_size,
        "gradient_clipping": t.grad_clip,
        "optimizer": {"type": "AdamW", "params": {"lr": t.lr, "weight_decay": t.weight_decay, "betas": [0.9, 0.999],
                                                  "eps": 1e-8, "torch_adam": True}},
        "zero_optimization": {"stage": t.zero_stage},
        "bf16": {"enabled": t.dtype == "bfloat16"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if t.warmup_steps:  # DeepSpeed's WarmupLR starts at lr 0; without warm-up the lr is constant (no scheduler)
        cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": t.lr,
                                                          "warmup_num_steps": t.warmup_steps, "warmup_type": "linear"}}
    return cfg


# ─── 2. data ───────────────────────────────────────────────────────────────────────────────

def load_train_problems(t: TrainConfig) -> list[dict[str, Any]]:
    """Training problems as {problem, gold} in a fixed order (the data order is a seeded permutation)."""
    if t.train_data == "synth_train":
        return [{"problem": r["problem"], "gold": r["answer"]} for r in task.generate("train", t.train_size, seed=t.seed)]
    problems, _ = load_dataset(t.train_data)
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


# ─── 3. the batch of rollouts as tensors ──────────────────────────────────────────────────

@dataclass
class Rollouts:
    """One rank's rollouts of a step. B rollouts, L = longest prompt+response, T = longest response."""

    input_ids: torch.Tensor  # (B, L) long, right-padded prompt + response
    attention: torch.Tensor  # (B, L) bool
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


def pack(prompt_ids: list[list[int]], samples: list, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded (B, L) prompt+response ids and (B, T) response ids/mask for ``samples``."""
    B = len(samples)
    seqs = [prompt_ids[s.prompt_index] + list(s.token_ids) for s in samples]
    L = max(len(x) for x in seqs)
    T = max(max(len(s.token_ids) for s in samples), 1)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention = torch.zeros(B, L, dtype=torch.bool)
    response = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    rollout_logp = torch.zeros(B, T, dtype=torch.float32)
    for b, (seq, s) in enumerate(zip(seqs, samples)):
        input_ids[b, : len(seq)] = torch.tensor(seq)
        attention[b, : len(seq)] = True
        n = len(s.token_ids)
        response[b, :n] = torch.tensor(s.token_ids, dtype=torch.long)
        mask[b, :n] = True
        if getattr(s, "logprobs", None) is not None:
            rollout_logp[b, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
    prompt_len = torch.tensor([len(prompt_ids[s.prompt_index]) for s in samples], dtype=torch.long)
    return {"input_ids": input_ids, "attention": attention, "prompt_len": prompt_len, "response_ids": response,
            "mask": mask, "rollout_logp": rollout_logp}


def response_logprobs(model, input_ids: torch.Tensor, attention: torch.Tensor, prompt_len: torch.Tensor,
                      response_ids: torch.Tensor, mask: torch.Tensor, *, temperature: float = 1.0,
                      with_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T) of the response tokens under ``model`` (and their logits (B, T, V) if asked).

    Token t of row b sits at column prompt_len[b] + t and is predicted by the logits at the
    column before it. Logits are divided by the sampling temperature, as the rollouts were drawn.
    """
    logits = model(input_ids=input_ids, attention_mask=attention.long()).logits
    B, T = response_ids.shape
    cols = (prompt_len.unsqueeze(1) - 1 + torch.arange(T, device=input_ids.device).unsqueeze(0)).clamp_max(input_ids.shape[1] - 1)
    picked = torch.gather(logits, 1, cols.unsqueeze(-1).expand(B, T, logits.shape[-1])).float()
    if temperature != 1.0:
        picked = picked / temperature
    logp = torch.log_softmax(picked, dim=-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    logp = torch.where(mask, logp, 0.0)
    return logp, (picked if with_logits else None)


# ─── 4. the trainer ───────────────────────────────────────────────────────────────────────

class Trainer:
    """Holds the DeepSpeed engine, the frozen reference, the rollout engine and the store.

    The phases of a step are methods, called in order by :meth:`step` (and, as Prefect tasks,
    by ``flows/train.py``).
    """

    def __init__(self, cfg: RunConfig, *, log: Callable[[str], None] = print, progress: bool = True):
        import deepspeed
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg, self.algo, self.t = cfg, cfg.algorithm, cfg.train
        self.rank, self.world = init_distributed()
        self.t.validate(self.algo, self.world)
        self.log = log if self.rank == 0 else (lambda _m: None)
        self.progress = progress and self.rank == 0
        self.run_id = self.t.resolved_run_id
        self.out = Path(self.t.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        if self.t.threads:
            torch.set_num_threads(self.t.threads)
        torch.manual_seed(self.t.seed)
        random.seed(self.t.seed)
        check_model_dir(self.t.model)
        self.tokenizer = AutoTokenizer.from_pretrained(self.t.model)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        dtype = torch.bfloat16 if self.t.dtype == "bfloat16" else torch.float32
        policy = AutoModelForCausalLM.from_pretrained(self.t.model, dtype=dtype)
        self.ref = AutoModelForCausalLM.from_pretrained(self.t.model, dtype=dtype)
        self.ref.eval().requires_grad_(False)
        if torch.cuda.is_available() and not self.t.ref_offload:
            self.ref.to(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=policy, model_parameters=[p for p in policy.parameters() if p.requires_grad],
            config=ds_config(self.t, self.world))
        self.device = self.engine.device
        self.problems = load_train_problems(self.t)
        self.estimator = get_estimator(self.algo.estimator)
        self.split = self.algo.step_split or "token"
        self.step_no = 0  # completed steps
        self._exported_step: int | None = None  # the step whose policy out/policy holds
        self._pending: list[tuple[int, dict[str, float], dict[str, list]]] = []  # steps since the last checkpoint
        self.rollout_engine = None
        self.pool = None
        self.store = None
        if self.rank == 0:
            self.store = Store(self.t.db)

    # ---- resources ----------------------------------------------------------------------

    def open(self) -> None:
        """Export the starting weights, start the rollout engine on them and the verifier workers, register the run."""
        self.export_policy()
        kwargs = {"in_process": None} if self.t.engine == "vllm" else {}
        self.rollout_engine = make_engine(self.t.engine, self.out / SYNC_DIR, dtype=self.t.dtype,
                                          seed=self.t.seed + self.rank, **kwargs)
        self.pool = VerifierPool(self.t.verifier_workers, timeout_s=5, wall_s=15.0)
        if self.store is not None:
            self.register_run("running")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.rollout_engine is not None:
            self.rollout_engine.close()
            self.rollout_engine = None

    def register_run(self, status: str) -> None:
        manifest = run_manifest("train", config=self.cfg.to_dict(), seed=self.t.seed)
        manifest.update(world_size=self.world, deepspeed=ds_config(self.t, self.world),
                        completed_steps=self.step_no, weight_sync=self.weight_sync_mode())
        self.store.execute("upsert_run", run_id=self.run_id, kind="train", model=str(Path(self.t.model).resolve()),
                           status=status, config=self.cfg.to_dict(), manifest=manifest, parent_run_id=None,
                           train_step=self.step_no)

    # ---- 4a. rollouts --------------------------------------------------------------------

    def rollout(self) -> dict[str, Any]:
        """This rank's prompts of the step and ``n_samples`` responses each."""
        idx = prompt_indices(len(self.problems), self.step_no, self.t.prompts_per_step, self.t.seed)
        per_rank = len(idx) // self.world
        mine = idx[self.rank * per_rank:(self.rank + 1) * per_rank]
        prompts = self.rollout_engine.build_prompts([self.problems[i]["problem"] for i in mine])
        sampling = SamplingConfig(n=self.algo.n_samples, temperature=self.t.temperature, top_p=1.0,
                                  max_tokens=self.t.max_tokens, seed=derive_seed(self.t.seed, "rollout", self.step_no),
                                  logprobs=True)  # compared with the trainer's own (rollout/logprob_diff_*)
        samples = self.rollout_engine.generate(prompts, sampling)
        prompt_ids = self.rollout_engine.encode(prompts)
        return {"indices": mine, "samples": samples, "prompt_ids": prompt_ids}

    # ---- 4b. verification ------------------------------------------------------------------

    def verify(self, ro: dict[str, Any]) -> Rollouts:
        samples = ro["samples"]
        golds = [self.problems[ro["indices"][s.prompt_index]]["gold"] for s in samples]
        verdicts = self.pool.verify([(s.text, g) for s, g in zip(samples, golds)])
        packed = pack(ro["prompt_ids"], samples, self.pad_id)
        return Rollouts(**packed, group_ids=torch.tensor([s.prompt_index for s in samples], dtype=torch.long),
                        rewards=torch.tensor([v.score for v in verdicts], dtype=torch.float32),
                        texts=[s.text for s in samples], golds=golds,
                        prompt_index=[ro["indices"][s.prompt_index] for s in samples],
                        verdicts=[v.verdict for v in verdicts])

    # ---- 4c. old-policy and reference log-probs ------------------------------------------------

    @torch.no_grad()
    def logprobs(self, r: Rollouts) -> dict[str, torch.Tensor]:
        """logp_old (current policy = rollout policy) and logp_ref, (B, T), micro-batched."""
        self.engine.module.eval()
        old, ref = [], []
        for sl in _slices(len(r.texts), self.t.micro_batch_size):
            args = self._batch(r, sl)
            old.append(response_logprobs(self.engine.module, *args, temperature=self.t.temperature)[0].cpu())
            ref_args = [a.to(next(self.ref.parameters()).device) for a in args]
            ref.append(response_logprobs(self.ref, *ref_args, temperature=self.t.temperature)[0].cpu())
        return {"logp_old": torch.cat(old), "logp_ref": torch.cat(ref)}

    def _batch(self, r: Rollouts, sl: slice | torch.Tensor):
        return [x[sl].to(self.device) for x in (r.input_ids, r.attention, r.prompt_len, r.response_ids, r.mask)]

    # ---- 4d. advantages -----------------------------------------------------------------------

    def boundaries(self, r: Rollouts) -> torch.Tensor | None:
        """Step boundaries (B, T) for text splits (they need token texts); None otherwise."""
        if parse_split(self.split).kind != "text":
            return None
        texts = [[self.tokenizer.decode([int(t)]) for t in row[m]] for row, m in zip(r.response_ids, r.mask)]
        return step_boundaries(r.mask, self.split, texts)

    def advantages(self, r: Rollouts, lp: dict[str, torch.Tensor]) -> torch.Tensor:
        """ρ (B, T): each response token's weight in the policy loss from the config's estimator (PRL's
        A − S/η filled per step; GRPO / Dr.GRPO / RAFT: the outcome advantage broadcast over the response)."""
        b = self.boundaries(r) if self.estimator.uses_steps else None
        return compute_advantages(self.algo, r.rewards, r.group_ids, lp["logp_old"], lp["logp_ref"], r.mask, b)

    # ---- 4e. policy update -------------------------------------------------------------------

    def update(self, r: Rollouts, lp: dict[str, torch.Tensor], rho: torch.Tensor) -> dict[str, float]:
        """``ppo_epochs`` passes of mini-batch updates; returns loss metrics and grad norm, means over updates."""
        self.engine.module.train()
        gen = torch.Generator().manual_seed(self.t.seed * 1_000_003 + self.step_no)
        sums: dict[str, float] = {}
        count, grad_norms = 0, []
        B = len(r.texts)
        for _ in range(self.t.ppo_epochs):
            perm = torch.randperm(B, generator=gen)
            for mb in perm.split(self.t.mini_batch_size):
                for micro in mb.split(self.t.micro_batch_size):
                    ids, attn, plen, resp, mask = self._batch(r, micro)
                    logp, logits = response_logprobs(self.engine, ids, attn, plen, resp, mask,
                                                     temperature=self.t.temperature, with_logits=True)
                    old, ref, a = (x[micro].to(self.device) for x in (lp["logp_old"], lp["logp_ref"], rho))
                    if self.estimator.loss == "sft":  # RAFT: likelihood of the selected (correct) responses
                        keep = mask & (a > 0)
                        loss = sft_loss(logp, keep, agg=self.algo.loss_agg)
                        metrics = {"actor/sft_loss": loss.detach(),
                                   "actor/entropy": masked_mean(token_entropy(logits.detach()), mask)}
                    else:
                        loss, metrics = ppo_clip_loss(logp, old, a, mask, clip_low=self.algo.clip_low,
                                                      clip_high=self.algo.clip_high, dual_clip=self.algo.dual_clip,
                                                      agg=self.algo.loss_agg, logits=logits)
                    if self.algo.kl_loss_coef > 0:
                        kl = masked_mean(kl_penalty(logp, ref, self.algo.kl_estimator), mask)
                        loss = loss + self.algo.kl_loss_coef * kl
                        metrics["actor/kl_loss"] = kl.detach()
                    metrics["actor/loss"] = loss.detach()
                    boundary = self.engine.is_gradient_accumulation_boundary()
                    self.engine.backward(loss)
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
        out["actor/lr"] = float(self.scheduler.get_last_lr()[0]) if self.scheduler is not None else self.t.lr
        return out

    # ---- 4f. weight sync -------------------------------------------------------------------------

    def sync_weights(self) -> None:
        """Bring every rank's rollout engine up to the current policy.

        From memory when the engine runs in this process (``train.weight_sync: memory``, the default;
        on CPU vLLM runs in-process): the policy's tensors are handed to it as they are — ZeRO-3
        gathers its partitions for the hand-over — and nothing is written. Otherwise (engine workers in
        other processes, or ``weight_sync: disk``) rank 0 writes ``out/policy`` with save_pretrained and
        every engine reloads it from there. ``out/policy`` is written in both cases whenever something
        reads it: before each evaluation and at the end of the run (:meth:`export_policy`).
        """
        engine = self.rollout_engine
        if engine is None:
            return
        if self.weight_sync_mode() == "memory":
            with self._full_parameters():
                engine.load_weights(policy_tensors(self.engine.module))
            return
        self.export_policy(force=True)
        engine.update_weights(self.out / SYNC_DIR)

    def weight_sync_mode(self) -> str:
        """'memory' or 'disk': how :meth:`sync_weights` reaches this run's rollout engine."""
        engine = self.rollout_engine
        return "memory" if self.t.weight_sync == "memory" and engine is not None and engine.loads_from_memory else "disk"

    def export_policy(self, *, force: bool = False) -> Path:
        """Write the current policy to ``out/policy`` (rank 0; every rank must call it: ZeRO-3 gathers, and
        a barrier), as evaluations, the disk sync and users load it. Skipped if this step's is there."""
        target = self.out / SYNC_DIR
        if force or self._exported_step != self.step_no or not (target / "config.json").is_file():
            with self._full_parameters():
                if self.rank == 0:
                    _save_policy(self.engine.module, self.tokenizer, target)
            torch.distributed.barrier()
            self._exported_step = self.step_no
        return target

    def _full_parameters(self):
        """ZeRO-3: every parameter gathered whole inside the block (stages 0-2 keep them whole anyway)."""
        if self.t.zero_stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.engine.module.parameters()), modifier_rank=None)

    # ---- 4g. diagnostics -------------------------------------------------------------------------

    def diagnostics(self, r: Rollouts, lp: dict[str, torch.Tensor], rho: torch.Tensor) -> dict[str, float]:
        m = r.mask
        k3 = kl_penalty(lp["logp_old"], lp["logp_ref"], "k3")
        groups = {}
        for g, rew in zip(r.group_ids.tolist(), r.rewards.tolist()):
            groups.setdefault(g, []).append(rew)
        on_response = rho[m]
        verdicts = {f"verify/{v}_frac": sum(x == v for x in r.verdicts) / max(1, len(r.verdicts))
                    for v in ("no_answer", "timeout", "error")}
        # The engine sampled from the weights it holds; the trainer recomputes them from its own. Equal up to
        # kernel numerics when the weight sync delivered the update (a stale engine shows as a gap).
        gap = (r.rollout_logp - lp["logp_old"]).abs()[m]
        return {**verdicts,
            "reward/mean": float(r.rewards.mean()),
            "reward/accuracy": float((r.rewards >= 1.0).float().mean()),
            "reward/all_equal_group_frac": sum(len(set(v)) == 1 for v in groups.values()) / max(1, len(groups)),
            "response/length": float(m.sum(1).float().mean()),
            "response/clipped_frac": float((m.sum(1) >= self.t.max_tokens).float().mean()),
            "kl/ref": float(masked_mean(k3, m)),
            "kl/ref_seq_sum": float((k3 * m).sum(1).mean()),
            "prl/rho_mean": float(on_response.mean()) if on_response.numel() else float("nan"),
            "prl/rho_std": float(on_response.std()) if on_response.numel() > 1 else float("nan"),
            "rollout/logprob_diff_max": float(gap.max()) if gap.numel() else float("nan"),
            "rollout/logprob_diff_mean": float(gap.mean()) if gap.numel() else float("nan"),
        }

    def segments(self, r: Rollouts, lp: dict[str, torch.Tensor], rho: torch.Tensor) -> list[dict[str, Any]]:
        """Per-segment rows (bounds, S at the boundary, ρ) for the first ``segments_per_step`` rollouts."""
        k = min(self.t.segments_per_step, len(r.texts))
        if k == 0:
            return []
        m = r.mask[:k]
        b = self.boundaries(r)
        b = b[:k] if b is not None else step_boundaries(m, self.split if self.estimator.uses_steps else "token")
        S = suffix_sums((lp["logp_old"][:k] - lp["logp_ref"][:k]).double(), m)
        rows = []
        for i in range(k):
            ends = torch.nonzero(b[i]).flatten().tolist()
            start = 0
            for j, end in enumerate(ends):
                rows.append({"run_id": self.run_id, "step": self.step_no, "rollout_idx": i, "segment_idx": j,
                             "start_tok": start, "end_tok": end, "kl_to_go": float(S[i, end]),
                             "rho": float(rho[i, end])})
                start = end + 1
        return rows

    def inspected_rollouts(self, r: Rollouts) -> list[dict[str, Any]]:
        """The rollouts whose segments are logged, with each response token's text (for the dashboard)."""
        k = min(self.t.segments_per_step, len(r.texts))
        return [{"run_id": self.run_id, "step": self.step_no, "rollout_idx": i,
                 "problem": self.problems[r.prompt_index[i]]["problem"], "gold": r.golds[i], "response": r.texts[i],
                 "reward": float(r.rewards[i]),
                 "tokens": [self.tokenizer.decode([int(t)]) for t in r.response_ids[i][r.mask[i]]]}
                for i in range(k)]

    # ---- 4h. one step ----------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One full step; returns the metrics written for it."""
        t0 = time.perf_counter()
        ro = self.rollout()
        t1 = time.perf_counter()
        r = self.verify(ro)
        t2 = time.perf_counter()
        lp = self.logprobs(r)
        t3 = time.perf_counter()
        rho = self.advantages(r, lp)
        metrics = self.diagnostics(r, lp, rho)
        metrics.update(self.update(r, lp, rho))
        t4 = time.perf_counter()
        self.sync_weights()
        t5 = time.perf_counter()
        metrics.update({"time/generate": t1 - t0, "time/verify": t2 - t1, "time/logprobs": t3 - t2,
                        "time/update": t4 - t3, "time/sync": t5 - t4, "time/step": t5 - t0})
        metrics = self.all_reduce_mean(metrics)
        self.step_no += 1
        segs = {"segments": self.segments(r, lp, rho), "rollouts": self.inspected_rollouts(r)} if self.rank == 0 else {}
        self.finish_step(metrics, segs)
        return metrics

    def all_reduce_mean(self, metrics: dict[str, float]) -> dict[str, float]:
        if self.world == 1:
            return metrics
        keys = sorted(metrics)
        t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.device)  # NCCL: on the GPU
        torch.distributed.all_reduce(t)
        return dict(zip(keys, (t / self.world).cpu().tolist()))

    # ---- 4i. log + checkpoint (in this order: a step is finished once its checkpoint exists) ------

    def finish_step(self, metrics: dict[str, float], segs: dict[str, list[dict[str, Any]]]) -> None:
        step = self.step_no
        self._pending.append((step, metrics, segs))
        if step % self.t.checkpoint_every == 0 or step == self.t.steps:
            self.save_checkpoint()
            if self.t.export_checkpoints:
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

    def save_checkpoint(self) -> None:
        tag = f"step_{self.step_no:06d}"
        state = {"step": self.step_no, "pending": self._pending, "torch_rng": torch.get_rng_state(),
                 "python_rng": random.getstate()}
        try:
            self.engine.save_checkpoint(str(self.out / CHECKPOINT_DIR), tag=tag, client_state=state)
        except Exception as e:  # full disk, quota, permissions: the previous checkpoint stays the latest
            shutil.rmtree(self.out / CHECKPOINT_DIR / tag, ignore_errors=True)
            prev = (self.out / CHECKPOINT_DIR / "latest")
            prev_tag = prev.read_text().strip() if prev.is_file() else None
            raise CheckpointError(
                f"{self.out / CHECKPOINT_DIR / tag}: could not write the checkpoint of step {self.step_no} "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r}); "
                + (f"the previous checkpoint {prev_tag} is intact" if prev_tag else "no earlier checkpoint exists")
                + " — free space and rerun with --resume") from e
        self._pending = []
        if self.rank == 0:
            tags = sorted(p for p in (self.out / CHECKPOINT_DIR).glob("step_*") if p.is_dir())
            for old in tags[: -self.t.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        torch.distributed.barrier()

    def export_checkpoint(self) -> Path:
        """The checkpoint's policy as a Hugging Face directory ``out/exports/step_N`` (what vLLM and the
        ``evaluate-checkpoint`` deployment load) with its record, announced by a Prefect event."""
        target = ckpt.export_dir(self.out, self.step_no)
        with self._full_parameters():
            if self.rank == 0:
                _save_policy(self.engine.module, self.tokenizer, target)
        torch.distributed.barrier()
        if self.rank == 0:
            record = ckpt.write_record(target, run_id=self.run_id, step=self.step_no, db=self.t.db, evaluation={
                "datasets": list(self.t.eval_datasets), "n": self.t.eval_n, "limit": self.t.eval_limit,
                "max_tokens": self.t.max_tokens, "engine": self.t.engine, "seed": self.t.seed})
            sent = ckpt.emit_checkpoint_event(record, log=self.log)
            self.log(f"[train] step {self.step_no}: export {target} (fingerprint {record['fingerprint']})"
                     + (f", event {ckpt.CHECKPOINT_EVENT} sent" if sent else ""))
            if self.t.keep_exports:
                for old in sorted((self.out / ckpt.EXPORTS_DIR).glob("step_*"))[: -self.t.keep_exports]:
                    shutil.rmtree(old, ignore_errors=True)
        return target

    def resume(self) -> bool:
        """Load the latest checkpoint (model, optimizer, scheduler, RNG, step). False if there is none.

        Tries the tag ``latest`` names, then older ones: a checkpoint that cannot be read (a file
        truncated by a crash or a full disk) is skipped with a warning naming it, and the run
        resumes from the newest one that loads; the steps after it are redone.
        """
        ckpt = self.out / CHECKPOINT_DIR
        tags = sorted((p.name for p in ckpt.glob("step_*") if p.is_dir()), reverse=True)  # newest first
        latest = (ckpt / "latest").read_text().strip() if (ckpt / "latest").is_file() else ""
        if not tags:  # killed before its first checkpoint: start over, dropping its rows
            self._drop_rows_after(0)
            return False
        # `latest` is written after a save completes: tags newer than it may be partial, but are
        # tried when `latest` itself is missing or damaged (a crash while writing it).
        order = ([latest] + [t for t in tags if t < latest]) if latest in tags else tags
        skipped: list[str] = []
        for tag in order:
            try:
                path, state = self.engine.load_checkpoint(str(ckpt), tag=tag)
            except Exception as e:  # noqa: BLE001 - reported below, then the next older checkpoint
                path, state = None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            if path is not None and isinstance(state, dict) and "step" in state:
                break
            skipped.append(f"{ckpt / tag} ({state or 'incomplete'})")
        else:
            raise ConfigError(f"{ckpt}: no checkpoint could be loaded: {'; '.join(skipped)}. Start over with a new "
                              "out_dir and run id, or delete this out_dir and the run's rows")
        if skipped:
            self.log(f"[train] WARNING: skipped unreadable checkpoint(s) {'; '.join(skipped)}; resuming from {path}")
        self.step_no = int(state["step"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        if self.store is not None:
            # Steps after the checkpoint never finished: drop their rows; re-write the checkpointed
            # steps' rows in case the process died between the checkpoint and the store write.
            self._drop_rows_after(self.step_no)
            for step, metrics, segs in state.get("pending", []):
                self.write_metrics(step, metrics, segs)
        self.log(f"[train] resumed {self.run_id} from {path} after step {self.step_no}")
        return True

    def _drop_rows_after(self, step: int) -> None:
        if self.store is None:
            return
        with self.store.write() as con:
            for q in ("delete_train_metrics_after", "delete_segments_after", "delete_rollouts_after"):
                con.execute(self.store.q[q], {"run_id": self.run_id, "step": step})

    # ---- 4j. evaluation of the current policy ------------------------------------------------------

    def evaluate(self) -> dict[str, Any] | None:
        """Evaluate ``out/policy`` with the rollout engine through the evaluation path (rank 0)."""
        if not self.t.eval_datasets:
            return None
        self.export_policy()  # the evaluation records (and a user reloads) the weights it evaluated
        if self.rank != 0:
            return None
        # the step's checkpoint export when there is one: the same model (path and fingerprint) that the
        # evaluate-checkpoint deployment evaluates for this step, so both resume one run, never make two
        export = ckpt.export_dir(self.out, self.step_no)
        model = export if (export / ckpt.EXPORT_RECORD).is_file() else self.out / SYNC_DIR
        cfg = EvalConfig(model=str(model), datasets=tuple(self.t.eval_datasets), n=self.t.eval_n,
                         db=self.t.db, run_id=ckpt.eval_run_id(self.run_id, self.step_no), engine=self.t.engine,
                         limit=self.t.eval_limit, max_tokens=self.t.max_tokens, temperature=1.0, seed=self.t.seed,
                         verifier_workers=self.t.verifier_workers, parent_run_id=self.run_id,
                         train_step=self.step_no)
        return run_evaluation(cfg, engine=self.rollout_engine, progress=False, log=self.log)

    # ---- 4k. the loop ---------------------------------------------------------------------------------

    def run(self, *, resume: bool = False) -> dict[str, Any]:
        resumed_from = None
        if resume and self.resume():
            resumed_from = self.step_no
        elif not resume:
            check_fresh_start(self.t)
        self.open()
        try:
            bar = tqdm(total=self.t.steps, initial=self.step_no, desc=f"train {self.run_id}", unit="step",
                       disable=not self.progress, file=sys.stderr)
            while self.step_no < self.t.steps:
                m = self.step()
                bar.update(1)
                self.log(summary_line(self.step_no, m))
                if self.t.eval_every and self.step_no % self.t.eval_every == 0 and self.step_no < self.t.steps:
                    self.evaluate()
            bar.close()
            self.export_policy()  # out/policy: the trained model, whichever way the steps were synced
            final_eval = self.evaluate() if self.t.eval_datasets else None
            if self.store is not None:
                self.register_run("finished")
            return {"run_id": self.run_id, "steps": self.step_no, "resumed_from_step": resumed_from,
                    "db": self.t.db, "out_dir": str(self.out), "final_eval": final_eval}
        except BaseException:
            if self.store is not None:
                self.store.execute("set_run_status", run_id=self.run_id, status="failed")
            raise
        finally:
            self.close()


def check_fresh_start(t: TrainConfig) -> None:
    """Refuse to start over a run that exists (its checkpoints or its rows in the store would be mixed up)."""
    ckpt = Path(t.out_dir) / CHECKPOINT_DIR
    if (ckpt / "latest").exists() or any(p.is_dir() for p in ckpt.glob("step_*")):
        raise ConfigError(f"{t.out_dir}: holds a checkpoint of an earlier run; pass --resume to continue it "
                          "or choose another out_dir")
    if Path(t.db).exists():
        if Store(t.db, create=False).rows("train_steps_for_run", run_id=t.resolved_run_id):
            raise ConfigError(f"{t.db}: run {t.resolved_run_id!r} already has training steps; pass --resume "
                              "to continue it or choose another --run-id")


def summary_line(step: int, m: dict[str, float]) -> str:
    return (f"[train] step {step}: reward {m['reward/mean']:.3f}, len {m['response/length']:.0f}, "
            f"kl_ref {m['kl/ref']:.4f}, rho {m['prl/rho_mean']:+.3f}±{m['prl/rho_std']:.3f}, "
            f"clip {m.get('actor/clipfrac', float('nan')):.3f}, loss {m['actor/loss']:+.4f}, "
            f"gn {m['actor/grad_norm']:.3f}, {m['time/step']:.1f} s "
            f"(gen {m['time/generate']:.1f}, ver {m['time/verify']:.1f}, lp {m['time/logprobs']:.1f}, "
            f"upd {m['time/update']:.1f})")


def policy_tensors(model) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of the model's weights by their checkpoint names, each shared tensor once (a tied
    LM head is dropped, as save_pretrained drops it); the tensors themselves, not copies."""
    seen: set[int] = set()
    out = []
    for name, tensor in model.state_dict(keep_vars=False).items():
        ptr = tensor.data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        out.append((name, tensor))
    return out


def _save_policy(model, tokenizer, target: Path) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def _grad_norm(model) -> float:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return float("nan")
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


def _slices(n: int, size: int) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


# ─── 5. command line (the launcher path; `prl train` runs the Prefect flow) ─────────────────────

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prl.training.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)  # the same options as `prl train` (prl.training.config)
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # set by the deepspeed launcher
    args = ap.parse_args(argv)
    logs.configure_from_env()  # launched by `prl demo`/`prl train`: library messages into their log file
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    cfg = run_config_from_args(args)
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the final JSON line
        trainer = Trainer(cfg, log=lambda m: print(m, file=sys.stderr, flush=True), progress=not args.no_progress)
        try:
            result = trainer.run(resume=args.resume)
        except (CheckpointError, ConfigError) as e:  # one line for the launcher's log, no traceback
            print(f"error: {e}", file=sys.stderr, flush=True)
            return 2
    if trainer.rank == 0:
        print(json.dumps(result, default=str), flush=True)
    if torch.distributed.is_initialized():  # vLLM's in-process engine tears the group down when it closes
        torch.distributed.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
