"""Write a real verl validation-generations dump (``<global_steps>.jsonl``) without a GPU.

Run inside the verl venv made by ``make_fixture.sh`` (verl 0.9.1 and its import deps; not the project's
venv). Everything that decides what lands in the file is verl's own code, run in-process:

* the config is composed from verl's packaged ``ppo_trainer.yaml`` with Hydra, exactly as
  ``python -m verl.trainer.main_ppo k=v ...`` composes it (the overrides are printed and recorded);
* the parquet files use verl's RL data schema (``data_source``, ``prompt`` as chat messages,
  ``ability``, ``reward_model.ground_truth``, ``extra_info.index``) and are loaded by verl's
  ``RLHFDataset`` / ``collate_fn`` / ``StatefulDataLoader``, built by ``RayPPOTrainer.__init__`` itself;
* ``RayPPOTrainer`` (the v0 trainer, ``trainer.use_v1=false``) is constructed with its real
  ``__init__``; only ``init_workers()`` (Ray actors, FSDP, vLLM on GPUs) is skipped;
* ``trainer._validate()`` runs as ``fit()`` runs it before training (``val_before_train``,
  ``global_steps == 0``): it repeats the batch ``val_kwargs.n`` times (interleaved), calls the
  rollout manager, decodes prompts and responses with ``skip_special_tokens=True``, collects
  ``reward`` and the reward extra infos, and calls ``_dump_generations`` -> ``_write_generations``;
* the rollout manager is verl's ``AgentLoopManager`` (via the subclass below, the hook verl offers
  with ``rollout.agent.agent_loop_manager_class``) driving verl's ``AgentLoopWorker`` and
  ``SingleTurnAgentLoop`` in this process instead of as Ray actors: prompt token ids come from
  verl's Continuous Token builder (the tokenizer's chat template, ``add_generation_prompt=True``),
  padding, masks and ``rm_scores`` from verl's post-processing;
* scores come from verl's ``RewardLoopWorker`` -> ``NaiveRewardManager`` -> ``default_compute_score``,
  which routes ``data_source == "math"`` to ``verl.utils.reward_score.math_dapo.compute_score``.

The one stand-in is the inference server: :class:`HFTransformersLLMClient` answers the same
``generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput`` call that verl's vLLM
server answers, by sampling with plain ``transformers`` ``model.generate`` on the CPU, with vLLM's
``max_tokens`` rule and the rollout's sampling parameters (temperature, top_p, top_k).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
    os.environ.setdefault(_var, "false" if _var == "TOKENIZERS_PARALLELISM" else "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402

torch.set_num_threads(1)

INSTRUCTION = " Let's think step by step and output the final answer within \\boxed{}."
DATA_SOURCE = "math"  # default_compute_score -> verl.utils.reward_score.math_dapo.compute_score


# --------------------------------------------------------------------------------------------- data
def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def to_verl_rows(records: list[dict], split: str) -> list[dict]:
    """The RL parquet schema of verl's examples/data_preprocess scripts (e.g. math_dataset.py)."""
    rows = []
    for idx, r in enumerate(records):
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": r["problem"] + INSTRUCTION}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(r["answer"])},
                "extra_info": {"split": split, "index": idx, "id": r["id"], "level": int(r["level"])},
            }
        )
    return rows


def write_parquet(rows: list[dict], path: Path) -> None:
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)


# ---------------------------------------------------------------------------------- the one stand-in
class HFTransformersLLMClient:
    """Answers verl's ``LLMServerClient.generate`` call with ``transformers`` sampling on the CPU.

    Same arguments and the same ``TokenOutput`` as verl's vLLM server; ``max_tokens`` follows
    ``vLLMHttpServer.generate`` (min(response_length, prompt_length + response_length - len(prompt)),
    capped by the context window). The response is the sampled ids up to and including the first EOS,
    as vLLM returns them. Each request is seeded with ``seed + priority`` (priority is the row's
    position in the repeated batch, assigned by ``AgentLoopManager.generate_sequences``), so the
    file does not depend on the order the coroutines happen to run in.
    """

    def __init__(self, model_dir: str, rollout_config, seed: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.prompt_length = int(rollout_config.prompt_length)
        self.response_length = int(rollout_config.response_length)
        self.max_model_len = int(self.model.config.max_position_embeddings)
        self.seed = seed
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None,
                       audio_data=None, mm_processor_kwargs=None, priority: int = 0, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        assert not (image_data or video_data or audio_data), "text-only stand-in"
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        max_possible = self.max_model_len - len(prompt_ids)
        if "max_tokens" in params:
            max_tokens = params.pop("max_tokens")
        elif "max_new_tokens" in params:
            max_tokens = params.pop("max_new_tokens")
        else:
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = max(1, min(max_tokens, max_possible))

        temperature = float(params.get("temperature", 1.0))
        top_p = float(params.get("top_p", 1.0))
        top_k = int(params.get("top_k", -1))
        greedy = temperature == 0
        gen_kwargs = dict(
            max_new_tokens=max_tokens,
            do_sample=not greedy,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            repetition_penalty=float(params.get("repetition_penalty", 1.0)),
        )
        if not greedy:
            gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        torch.manual_seed(self.seed + int(priority))
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **gen_kwargs)
        token_ids = out[0, len(prompt_ids):].tolist()
        eos = self.tokenizer.eos_token_id
        finished = eos in token_ids
        if finished:
            token_ids = token_ids[: token_ids.index(eos) + 1]
        self.calls.append({"priority": int(priority), "prompt_len": len(prompt_ids), "response_len": len(token_ids),
                           "finish": "stop" if finished else "length", "max_tokens": max_tokens,
                           "sampling": {k: gen_kwargs[k] for k in ("do_sample", "temperature", "top_p", "top_k")
                                        if k in gen_kwargs}})
        return TokenOutput(token_ids=token_ids, log_probs=None, stop_reason="completed", num_preempted=0,
                           extra_fields={"global_steps": 0})


class _LocalActor:
    """An in-process object with a Ray-actor-like ``handle.method.remote(...)`` (awaitable) interface.

    The object is built lazily inside the running event loop, as a Ray actor builds its own, so that
    verl's reward managers (which capture ``get_event_loop()`` at construction) use the loop they run in.
    """

    def __init__(self, factory):
        self._factory = factory
        self._instance = None
        self._loop = None

    def _get(self):
        loop = asyncio.get_running_loop()
        if self._instance is None or self._loop is not loop:
            self._instance, self._loop = self._factory(), loop
        return self._instance

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        actor = self

        class _Method:
            @staticmethod
            def remote(*args, **kwargs):
                async def call():
                    return await getattr(actor._get(), name)(*args, **kwargs)

                return call()

        return _Method()


def make_manager_cls():
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker

    class InProcessAgentLoopManager(AgentLoopManager):
        """verl's AgentLoopManager with its AgentLoopWorkers in this process instead of Ray actors."""

        agent_loop_workers_class = AgentLoopWorker  # presence stops __init__ from wrapping it in ray.remote

        async def _init_agent_loop_workers(self):
            self.agent_loop_workers = [
                _LocalActor(lambda: AgentLoopWorker(self.config, self.llm_client, self.teacher_client,
                                                    self.reward_loop_worker_handles))
                for _ in range(self.rollout_config.agent.num_workers)
            ]

    return InProcessAgentLoopManager


# ------------------------------------------------------------------------------------------- config
def compose_config(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import verl.trainer

    config_dir = Path(verl.trainer.__file__).resolve().parent / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF model directory (the warm-started tiny model)")
    ap.add_argument("--test", required=True, help="synth_test.jsonl (id, problem, answer, solution, level)")
    ap.add_argument("--train", required=True, help="synth_train.jsonl (RayPPOTrainer.__init__ needs a train set)")
    ap.add_argument("--work", required=True, help="scratch directory (parquet files, dump dir, caches)")
    ap.add_argument("--problems", type=int, default=20)
    ap.add_argument("--samples", type=int, default=2, help="rollout.val_kwargs.n")
    ap.add_argument("--max-new-tokens", type=int, default=200, help="data.max_response_length")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record", help="write a JSON record of the run (config overrides, versions, calls) here")
    args = ap.parse_args()

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_DATASETS_CACHE", str(work / "hf_datasets_cache"))
    dump_dir = work / "validation_generations"
    if dump_dir.exists():
        for p in dump_dir.iterdir():
            p.unlink()

    test = read_jsonl(Path(args.test))[: args.problems]
    train = read_jsonl(Path(args.train))
    if len(test) < args.problems:
        raise SystemExit(f"{args.test}: only {len(test)} problems")
    val_parquet, train_parquet = work / "val.parquet", work / "train.parquet"
    write_parquet(to_verl_rows(test, "test"), val_parquet)
    write_parquet(to_verl_rows(train, "train"), train_parquet)

    overrides = [
        "trainer.use_v1=false",  # the RayPPOTrainer path (verl/trainer/main_ppo_v0.py)
        "algorithm.adv_estimator=grpo",
        f"data.train_files={train_parquet}",
        f"data.val_files={val_parquet}",
        f"data.train_batch_size={len(train)}",
        "data.max_prompt_length=256",
        f"data.max_response_length={args.max_new_tokens}",
        "data.dataloader_num_workers=0",
        "data.filter_overlong_prompts_workers=1",
        f"actor_rollout_ref.model.path={Path(args.model).resolve()}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={len(train)}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.calculate_log_probs=false",
        f"actor_rollout_ref.rollout.val_kwargs.n={args.samples}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
        "actor_rollout_ref.rollout.val_kwargs.top_k=-1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.logger=[console]",
        "trainer.project_name=prl_fixture",
        "trainer.experiment_name=verl_val_dump",
        "trainer.val_before_train=true",
        "trainer.val_only=true",
        "trainer.log_val_generations=0",
        f"trainer.validation_data_dir={dump_dir}",
        f"trainer.default_local_dir={work / 'checkpoints'}",
    ]
    print("verl overrides:\n  " + "\n  ".join(overrides), flush=True)

    from omegaconf import OmegaConf

    import verl
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.utils import Role, create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.utils.skip.skip_manager import SkipManager
    from verl.workers.config import HFModelConfig

    config = compose_config(overrides)
    # as verl.trainer.main_ppo.main does before launching, then TaskRunner.run
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    OmegaConf.resolve(config)

    # --- as verl/trainer/main_ppo_v0.py TaskRunner.run, minus the Ray worker/resource-pool set-up
    model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    tokenizer, processor = model_config.tokenizer, model_config.processor
    train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor, is_train=True,
                                      max_samples=config.data.get("train_max_samples", -1))
    val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, processor, is_train=False,
                                    max_samples=config.data.get("val_max_samples", -1))
    train_sampler = create_rl_sampler(config.data, train_dataset)
    trainer = RayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        processor=processor,
        role_worker_mapping={Role.ActorRollout: object},  # never instantiated: init_workers() is not called
        resource_pool_manager=None,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        collate_fn=collate_fn,
        train_sampler=train_sampler,
    )

    # --- what init_workers() would attach for validation: the agent-loop rollout manager, with
    # streaming reward computation on reward-loop workers (no reward model: use_rm is False)
    assert not trainer.use_rm
    llm_client = HFTransformersLLMClient(str(Path(args.model).resolve()), config.actor_rollout_ref.rollout, args.seed)
    reward_handles = [_LocalActor(lambda: RewardLoopWorker(config, None)) for _ in range(config.reward.num_workers)]
    trainer.async_rollout_manager = make_manager_cls().create(
        config=config, llm_client=llm_client, teacher_client=None, reward_loop_worker_handles=reward_handles
    )

    # --- as RayPPOTrainer.fit(): global_steps = 0, SkipManager.init, val_before_train -> _validate()
    trainer.global_steps = 0
    SkipManager.init(config)
    t0 = time.time()
    val_metrics = trainer._validate()
    trainer._shutdown_dump_executor()  # as fit() does on val_only: drains the async dump
    elapsed = time.time() - t0
    print(f"validation metrics: {json.dumps({k: float(v) for k, v in val_metrics.items()}, sort_keys=True)}")

    dumped = sorted(dump_dir.glob("*.jsonl"))
    if [p.name for p in dumped] != [f"{trainer.global_steps}.jsonl"]:
        raise SystemExit(f"expected {trainer.global_steps}.jsonl in {dump_dir}, found {[p.name for p in dumped]}")
    dump = dumped[0]
    rows = read_jsonl(dump)
    expect = args.problems * args.samples
    if len(rows) != expect:
        raise SystemExit(f"{dump}: {len(rows)} rows, expected {expect}")
    print(f"{dump}: {len(rows)} rows, sha256 {hashlib.sha256(dump.read_bytes()).hexdigest()}, {elapsed:.0f}s")

    if args.record:
        import importlib.metadata as md

        versions = {}
        for dist in ("verl", "torch", "transformers", "tokenizers", "numpy", "tensordict", "ray", "omegaconf",
                     "hydra-core", "datasets", "pandas", "pyarrow", "torchdata"):
            try:
                versions[dist] = md.version(dist)
            except md.PackageNotFoundError:
                versions[dist] = None
        record = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": [sys.executable, *sys.argv],
            "dump": str(dump),
            "sha256": hashlib.sha256(dump.read_bytes()).hexdigest(),
            "rows": len(rows),
            "global_steps": trainer.global_steps,
            "overrides": overrides,
            "versions": versions,
            "verl_file": verl.__file__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "seconds": round(elapsed, 1),
            "val_metrics": {k: float(v) for k, v in val_metrics.items()},
            "generate_calls": sorted(llm_client.calls, key=lambda c: c["priority"]),
            "val_problems": [r["id"] for r in test],
        }
        Path(args.record).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
