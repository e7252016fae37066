"""The process group, each rank's device, and the DeepSpeed config a training config implies.

One rank per process (DeepSpeed's launcher starts them; a single process sets the variables itself).
Everything here is the same on CPU (gloo) and on GPUs (NCCL): the dry run imports this module, not the
trainer, to show the DeepSpeed config it will use.
"""

from __future__ import annotations

import os
import socket
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


def init_distributed() -> tuple[int, int]:
    """Start (or join) the process group DeepSpeed uses; returns (rank, world size).

    Single-process runs get the environment DeepSpeed (and vLLM's external launcher) expect: RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. On GPUs the rank's device becomes the current one.
    """
    import deepspeed

    on_gpu = torch.cuda.is_available()
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if on_gpu else "cpu")
    if not on_gpu:
        without_cpu_shm_comm_op()
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    if on_gpu:
        torch.cuda.set_device(device())
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
