"""The process group, each rank's device, and the DeepSpeed config a training config implies.

One rank per process (DeepSpeed's launcher starts them; a single process sets the variables itself).
Everything here is the same on CPU (gloo) and on GPUs (NCCL): the dry run imports this module, not the
trainer, to show the DeepSpeed config it will use.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import torch

from prl.training.config import TrainConfig


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


def local_rank() -> int:
    """This process's index on its node (``LOCAL_RANK``, set by the launcher; 0 alone)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def device() -> torch.device:
    """This rank's device: ``cuda:<LOCAL_RANK>`` on GPUs (the launcher leaves every GPU visible to every
    rank), the CPU otherwise. The policy, the reference and the rollout engine all live on it."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


SLURM_VARS = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID"}
"""The launcher variable each SLURM task variable stands for (``srun`` sets these, not the launcher's)."""


def launcher_env(env: dict[str, str]) -> dict[str, str]:
    """The launcher variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) this process should add to
    ``env``, which is left unchanged; empty when a launcher (deepspeed, torchrun) has set them or nothing has.

    Under ``srun`` without a launcher, SLURM's task variables give the ranks (:data:`SLURM_VARS`); the first
    node of ``SLURM_JOB_NODELIST``/``SLURM_NODELIST`` is the rendezvous unless MASTER_ADDR is set (the
    documented ``sbatch`` example sets it: docs/scaling.md), and MASTER_PORT defaults to 29500 + the job id
    mod 1000, the same on every task of a job. A node list this function cannot expand (ranges) needs
    MASTER_ADDR set."""
    if "RANK" in env or "SLURM_PROCID" not in env:
        return {}
    missing = [v for v in SLURM_VARS.values() if v not in env]
    if missing:
        raise RuntimeError(f"SLURM: {', '.join(missing)} not set beside SLURM_PROCID; launch the tasks with srun "
                           "(one task per GPU), or set RANK, WORLD_SIZE and LOCAL_RANK yourself")
    out = {ours: env[theirs] for ours, theirs in SLURM_VARS.items()}
    if "MASTER_ADDR" not in env:
        nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
        first = nodes.split(",")[0]
        if not first or "[" in first:
            raise RuntimeError(f"SLURM: cannot tell the first node from the node list {nodes!r}; set MASTER_ADDR "
                               "(e.g. MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1))")
        out["MASTER_ADDR"] = first
    if "MASTER_PORT" not in env:
        out["MASTER_PORT"] = str(29500 + int(env.get("SLURM_JOB_ID", "0") or 0) % 1000)
    return out


def init_distributed(timeout_min: float = 60) -> tuple[int, int]:
    """Start (or join) the process group DeepSpeed uses; returns (rank, world size).

    ``timeout_min``: how long a collective may wait (``train.dist_timeout_min``), for DeepSpeed's group and so
    torch's default group, which is the same one. Single-process runs get the environment DeepSpeed (and
    vLLM's external launcher) expect: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; tasks started
    by ``srun`` get them from SLURM's (:func:`launcher_env`). On GPUs the rank's device becomes the current one.
    """
    import deepspeed

    on_gpu = torch.cuda.is_available()
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if on_gpu else "cpu")
    if not on_gpu:
        without_cpu_shm_comm_op()
    os.environ.update(launcher_env(dict(os.environ)))
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    if on_gpu:
        torch.cuda.set_device(device())
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False,
                                   timeout=timedelta(minutes=timeout_min))
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def group_timeout() -> timedelta:
    """The collective timeout of the default process group as its backend holds it (what
    :func:`init_distributed` set; NCCL's and gloo's backends both keep it in their options)."""
    from torch.distributed import distributed_c10d as c10d

    pg = c10d._get_default_group()
    backend = pg._get_backend(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return backend.options._timeout


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
    if t.dtype == "bfloat16" and t.zero_stage >= 1:
        # DeepSpeed accumulates (and reduces) in the model's dtype unless told; its ZeRO optimizers take fp32
        # (stage 1 through its BF16 optimizer), ZeRO 0 refuses the mix (engine._do_optimizer_sanity_check)
        cfg["data_types"] = {"grad_accum_dtype": t.grad_accum_dtype}
    if t.warmup_steps:  # DeepSpeed's WarmupLR starts at lr 0; without warm-up the lr is constant (no scheduler)
        cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": t.lr,
                                                          "warmup_num_steps": t.warmup_steps, "warmup_type": "linear"}}
    return cfg


def reference_ds_config(t: TrainConfig, world_size: int) -> dict[str, Any]:
    """The frozen reference under ZeRO-3: partitioned like the policy (no optimizer), so each rank holds
    1/world of it and gathers one layer at a time in its forward pass, as OpenRLHF and verl shard theirs."""
    return {"train_micro_batch_size_per_gpu": t.micro_batch_size,
            "gradient_accumulation_steps": t.mini_batch_size // t.micro_batch_size,
            "train_batch_size": t.mini_batch_size * world_size,
            "zero_optimization": {"stage": 3}, "bf16": {"enabled": t.dtype == "bfloat16"},
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


def all_reduce_mean(metrics: dict[str, float], world: int, on: torch.device) -> dict[str, float]:
    """Every rank's ``metrics`` averaged over the ranks (the same keys on every rank)."""
    if world == 1:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=on)  # NCCL: on the GPU
    torch.distributed.all_reduce(t)
    return dict(zip(keys, (t / world).cpu().tolist()))


def all_reduce_max(value: int, world: int, on: torch.device) -> int:
    """The largest ``value`` over the ranks (every rank gets it)."""
    if world == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=on)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return int(t.item())


def broadcast(obj: Any, world: int, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank (picklable objects; a CPU group copy on NCCL)."""
    if world == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def gather(obj: Any, world: int, dst: int = 0) -> list[Any] | None:
    """Every rank's ``obj``, in rank order, on rank ``dst`` (None on the others)."""
    if world == 1:
        return [obj]
    out: list[Any] | None = [None] * world if torch.distributed.get_rank() == dst else None
    torch.distributed.gather_object(obj, out, dst=dst)
    return out


def barrier(world: int) -> None:
    if world > 1:
        torch.distributed.barrier()
