"""Ready for a cluster (issue 36): the process group's timeout, bf16 gradients accumulated in fp32, SLURM's
variables, evaluation shares balanced over the ranks.

Each runs the real component: the process group and DeepSpeed's engine start in a subprocess of their own
(one rank, gloo), the shares are dealt over the five benchmarks' own problems.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from prl_core.config import ConfigError

from prl.training.config import TrainConfig
from prl.training.distributed import SLURM_VARS, ds_config, launcher_env

ROOT = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def _python(code: str, env: dict[str, str] | None = None, timeout: int = 300) -> dict:
    """Run ``code`` in a fresh interpreter without launcher variables (plus ``env``); its last stdout line is JSON."""
    base = {k: v for k, v in os.environ.items() if k not in DIST_VARS and not k.startswith("SLURM_")}
    base.update(DS_ACCELERATOR="cpu", PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p), **(env or {}))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# ─── F1: the process group waits as long as the config says ─────────────────────────────────────

def test_the_process_group_takes_the_configs_timeout_not_deepspeeds_ten_minutes():
    out = _python(
        "import json\n"
        "from prl.training import distributed as d\n"
        "from prl.training.config import TrainConfig\n"
        "d.init_distributed(TrainConfig().dist_timeout_min)\n"
        "a = d.group_timeout().total_seconds()\n"
        "import torch.distributed as td; td.destroy_process_group()\n"
        "d.init_distributed(37)\n"
        "print(json.dumps({'default': a, 'given': d.group_timeout().total_seconds()}))\n")
    assert out == {"default": 60 * 60.0, "given": 37 * 60.0}


@pytest.mark.parametrize("value", [0, -5, 2.5, True, "60"])
def test_a_bad_timeout_is_refused_naming_the_field(value):
    from prl_core.config import AlgorithmConfig

    with pytest.raises(ConfigError, match=r"train\.dist_timeout_min: expected whole minutes >= 1"):
        TrainConfig(model="m", dist_timeout_min=value).validate(AlgorithmConfig(estimator="grpo"))


# ─── F3: bf16 gradients accumulate in fp32 ───────────────────────────────────────────────────────

def test_the_deepspeed_config_asks_for_fp32_accumulation_where_deepspeed_takes_it():
    bf16 = {stage: ds_config(TrainConfig(model="m", dtype="bfloat16", zero_stage=stage), 4) for stage in range(4)}
    assert "data_types" not in bf16[0]  # DeepSpeed refuses bf16 weights with fp32 accumulation at ZeRO 0
    assert all(bf16[s]["data_types"] == {"grad_accum_dtype": "fp32"} for s in (1, 2, 3))
    assert "data_types" not in ds_config(TrainConfig(model="m", zero_stage=2), 4)  # fp32 runs: fp32 already
    kept = ds_config(TrainConfig(model="m", dtype="bfloat16", zero_stage=2, grad_accum_dtype="bf16"), 4)
    assert kept["data_types"] == {"grad_accum_dtype": "bf16"}
    from prl_core.config import AlgorithmConfig

    with pytest.raises(ConfigError, match=r"train\.grad_accum_dtype: expected 'fp32' or 'bf16', got 'fp16'"):
        TrainConfig(model="m", grad_accum_dtype="fp16").validate(AlgorithmConfig(estimator="grpo"))


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeeds_zero_optimizer_accumulates_bf16_gradients_in_fp32(stage):
    """DeepSpeed's own engine, built from our config on a small bf16 model: its ZeRO optimizer accumulates in fp32
    while the model's weights stay bf16."""
    out = _python(
        "import json, torch, deepspeed\n"
        "from prl.training import distributed as d\n"
        "from prl.training.config import TrainConfig\n"
        "d.init_distributed(5)\n"
        f"t = TrainConfig(model='m', dtype='bfloat16', zero_stage={stage}, mini_batch_size=4, micro_batch_size=2)\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)).to(torch.bfloat16)\n"
        "eng, opt, _, _ = deepspeed.initialize(model=model, config=d.ds_config(t, 1), model_parameters=model.parameters())\n"
        "print(json.dumps({'accum': str(opt.gradient_accumulation_dtype), 'model': str(next(eng.module.parameters()).dtype)}))\n")
    assert out == {"accum": "torch.float32", "model": "torch.bfloat16"}


# ─── SLURM: srun's variables stand in for the launcher's ─────────────────────────────────────────

def test_srun_tasks_get_their_ranks_from_slurm():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "123456",
           "SLURM_JOB_NODELIST": "gpu-017,gpu-018"}
    assert launcher_env(env) == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu-017",
                                 "MASTER_PORT": str(29500 + 456)}
    assert env["SLURM_PROCID"] == "5" and "RANK" not in env  # the caller's mapping is left as it was
    # a launcher's variables win (torchrun or deepspeed inside an allocation), and outside SLURM nothing changes
    assert launcher_env({**env, "RANK": "0", "WORLD_SIZE": "2"}) == {}
    assert launcher_env({}) == {}
    # given MASTER_ADDR / MASTER_PORT are kept; a compressed node list cannot be expanded here: it says what to set
    given = launcher_env({**env, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "4000"})
    assert given == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}  # MASTER_* stay as the user set them
    with pytest.raises(RuntimeError, match=r"cannot tell the first node from the node list 'gpu-\[017-018\]'; "
                                           r"set MASTER_ADDR"):
        launcher_env({**env, "SLURM_JOB_NODELIST": "gpu-[017-018]"})
    with pytest.raises(RuntimeError, match=r"SLURM: SLURM_NTASKS not set beside SLURM_PROCID"):
        launcher_env({k: v for k, v in env.items() if k != "SLURM_NTASKS"})
    assert set(SLURM_VARS) == {"RANK", "WORLD_SIZE", "LOCAL_RANK"}


def test_a_process_started_by_srun_joins_the_group_with_slurms_rank():
    """One srun task (rank 0 of 1) on this host: the group starts from SLURM's variables alone."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _python(
        "import json, os\n"
        "from prl.training import distributed as d\n"
        "rank, world = d.init_distributed(3)\n"
        "print(json.dumps({'rank': rank, 'world': world, 'local': d.local_rank(), 'addr': os.environ['MASTER_ADDR'],"
        " 'timeout': d.group_timeout().total_seconds()}))\n",
        env={"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "1",
             "SLURM_JOB_NODELIST": "127.0.0.1", "MASTER_PORT": str(port)})
    assert out == {"rank": 0, "world": 1, "local": 0, "addr": "127.0.0.1", "timeout": 180.0}


# ─── F4: evaluation shares balanced over the ranks ───────────────────────────────────────────────

PAPER_SETS = ("math500", "minerva_math", "olympiad_bench", "aime24", "amc23")


@pytest.mark.parametrize("world", [4, 8, 3])
def test_ranks_get_the_same_share_of_every_benchmark(world):
    """The paper's evaluation (its five benchmarks, in run order) dealt to the ranks: each problem once, every rank
    within one problem of the others on every benchmark. Contiguous ranges, the old plan, put AIME and AMC (the
    longest responses) on the last rank alone."""
    from prl.data.datasets import load_dataset
    from prl.evaluation import shards as sh

    problems = [p for name in PAPER_SETS for p in load_dataset(name)[0]]
    dealt = sh.deal_shards(problems, world)
    assert len(dealt) == world
    keys = [(p.dataset, p.problem_id) for shard in dealt for p in shard.problems]
    assert sorted(keys) == sorted((p.dataset, p.problem_id) for p in problems) and len(set(keys)) == len(keys)
    assert all(s.name.startswith("shard-") for s in dealt)  # what a rerun's leftover-file scan looks for
    for name in PAPER_SETS:
        counts = [Counter(p.dataset for p in s.problems)[name] for s in dealt]
        assert max(counts) - min(counts) <= 1, (name, counts)
    contiguous = sh.plan_shards(problems, -(-len(problems) // world))
    assert {p.dataset for p in contiguous[-1].problems} >= {"aime24", "amc23"}
    assert all("aime24" not in {p.dataset for p in s.problems} for s in contiguous[:-2])


def test_fewer_problems_than_ranks_leaves_the_last_ranks_without_a_shard():
    from prl.data.datasets import load_dataset
    from prl.evaluation import shards as sh

    problems = load_dataset("aime24")[0][:3]
    dealt = sh.deal_shards(problems, 4)
    assert [len(s.problems) for s in dealt] == [1, 1, 1]
    with pytest.raises(ValueError, match="world: must be >= 1"):
        sh.deal_shards(problems, 0)
