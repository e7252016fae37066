"""`prl train --dry-run` (issues 15, 26): the paper's Qwen2.5-Math-1.5B and 7B runs planned offline, from the
shipped public config.json files and the offline Qwen2.5 tokenizer, with DeepSpeed's own estimators for the
model states and the rest of a rank's memory term by term (prl.training.memory)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prl_core.config import ConfigError

from prl.training import dry_run
from prl.training import memory as mem
from prl.training.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "configs" / "train" / "paper_qwen2.5_math_1.5b.yaml"
PAPER_7B = ROOT / "configs" / "train" / "paper_qwen2.5_math_7b.yaml"
GB = 1e9


@pytest.fixture(scope="module")
def paper_plan():
    return dry_run.plan(RunConfig.from_yaml(PAPER), gpus_per_node=4)


def qwen2_parameters(c: dict) -> int:
    """Qwen2's parameter count written out from its architecture (q/k/v with biases, o without, SwiGLU MLP,
    two RMSNorms per layer and a final one, a tied head) — independent of transformers."""
    h, i, v, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h
    per_layer = attention + 3 * h * i + 2 * h
    head = 0 if c["tie_word_embeddings"] else v * h
    return v * h + layers * per_layer + h + head


def test_the_shipped_config_is_the_models_and_counts_its_parameters(paper_plan):
    m = paper_plan["model"]
    config = json.loads(Path(m["config_path"]).read_text())
    assert not m["local"] and m["tokenizer"] == "qwen2.5" and m["architecture"] == "Qwen2ForCausalLM"
    assert m["total"] == qwen2_parameters(config)
    assert 1.54e9 < m["total"] < 1.55e9  # "Qwen2.5-Math-1.5B: 1.54 B parameters"
    assert m["largest_layer"] == config["vocab_size"] * config["hidden_size"]  # the (tied) embedding


def test_memory_follows_deepspeeds_zero2_formula(paper_plan):
    """ZeRO-2 without offload, per GPU (DeepSpeed 0.19.8's stated multipliers): 2 B of 16-bit parameters on
    every GPU + 18 B per parameter partitioned over the N GPUs (16-bit and 32-bit gradients, 32-bit
    master weights, Adam's two moments). The plan takes it from DeepSpeed's estimator."""
    p, mem = paper_plan["model"]["total"], paper_plan["memory"]
    assert mem["stage"] == 2 and "estimate_zero2" in mem["method"]
    assert mem["model_states_gpu_gib"] * 1024 ** 3 == pytest.approx(2 * p + int(18 * p / 4), abs=1)
    states = next(t for t in paper_plan["memory_plan"]["terms"] if t["name"] == "model states")
    # the plan's term is DeepSpeed's estimate + the fp32 gradient-accumulation partition it does not count
    # (grad_accum_dtype: fp32, the default for bf16: 4 bytes per parameter / 4 ranks)
    assert paper_plan["config"]["train"]["grad_accum_dtype"] == "fp32"
    assert paper_plan["deepspeed"]["data_types"] == {"grad_accum_dtype": "fp32"}
    assert states["gib"] * 1024 ** 3 == pytest.approx(mem["model_states_gpu_gib"] * 1024 ** 3 + 4 * p / 4, abs=1)
    assert "fp32 gradient accumulation" in states["how"]
    assert "offload_optimizer=none" in mem["deepspeed_table"] and "4 GPUs per node" in mem["deepspeed_table"]


def test_batch_and_token_arithmetic(paper_plan):
    ds, tok = paper_plan["deepspeed"], paper_plan["tokens"]
    assert ds["train_batch_size"] == 640 and ds["gradient_accumulation_steps"] == 20
    assert ds["zero_optimization"] == {"stage": 2} and ds["bf16"] == {"enabled": True}
    assert tok["rollouts_per_step"] == 128 * 5 and tok["rollouts_per_rank"] == 160
    assert tok["response_tokens_per_step_max"] == 640 * 3072 and tok["optimizer_updates_per_step"] == 1
    assert tok["context_note"] is None  # a 148-token prompt + 3,072 tokens fit Qwen2.5-Math's 4,096


def test_prompt_and_step_preview_as_training_sees_them(paper_plan):
    prompt = paper_plan["prompt"]
    assert prompt["format"] == "chat_template"
    assert prompt["rendered"].startswith("<|im_start|>system\nPlease reason step by step")
    assert prompt["rendered"].endswith("<|im_end|>\n<|im_start|>assistant\n")
    solution = dry_run.sample_problem()[2]
    for split, steps in paper_plan["steps"].items():
        assert "".join(s["text"] for s in steps) == solution  # every token in exactly one step, in order
        assert steps[-1]["last_token"] == paper_plan["sample_solution_tokens"] - 1
    fixed = paper_plan["steps"]["fixed:256"]
    assert [s["tokens"] for s in fixed[:-1]] == [256] * (len(fixed) - 1)
    text = paper_plan["steps"]["text:\\n\\n"]
    assert len(text) == solution.count("\n\n") + 1
    # the delimiter is fused with what precedes it in Qwen's tokenizer ('.ĊĊ'), and still found
    assert all(s["boundary_token"].endswith("\n\n") and s["boundary_token"] != "\n\n" for s in text[:-1])


def test_zero3_and_a_local_model_directory(tiny_model_dir, tmp_path):
    cfg = RunConfig.from_yaml(PAPER, model=str(tiny_model_dir))
    cfg.train.zero_stage = 3
    plan = dry_run.plan(cfg, gpus_per_node=2, nodes=2)
    assert plan["model"]["local"] and plan["model"]["tokenizer"] == "local"
    assert "estimate_zero3" in plan["memory"]["method"] and plan["world"]["world_size"] == 4
    assert "--num_nodes 2" in plan["world"]["launch"]
    # ZeRO-3 partitions the parameters too: less per GPU than ZeRO-2 on the same 4 GPUs
    cfg.train.zero_stage = 2
    assert plan["memory"]["model_states_gpu_gib"] < dry_run.plan(cfg, gpus_per_node=2, nodes=2)["memory"][
        "model_states_gpu_gib"]


def test_unknown_model_is_a_clear_error():
    cfg = RunConfig.from_yaml(PAPER, model="someone/unknown-model")
    with pytest.raises(ConfigError, match="train.model: 'someone/unknown-model' is neither a model directory"):
        dry_run.plan(cfg, gpus_per_node=4)
    with pytest.raises(ConfigError, match="train.prompts_per_step"):  # validated for the planned world size
        dry_run.plan(RunConfig.from_yaml(PAPER), gpus_per_node=3, nodes=1)


def test_cli_prints_the_plan_and_writes_json(tmp_path):
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "-m", "prl_cli", "train", "--config", str(PAPER), "--dry-run",
                        "--gpus-per-node", "4", "--out", str(tmp_path / "run"), "--plan-json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "1.544 B parameters" in r.stdout and "stage 2 (bfloat16)" in r.stdout and "'text:\\\\n\\\\n'" in r.stdout
    assert "FITS: peak" in r.stdout and "on H100-80GB" in r.stdout
    for term in ("model states", "reference", "engine", "activations", "log-prob chunk", "overhead"):
        assert f"  {term}" in r.stdout, term
    assert json.loads(out.read_text())["tokens"]["rollouts_per_step"] == 640
    assert not (tmp_path / "run").exists()  # nothing started, nothing written but the log beside it
    assert "WARNING" not in r.stderr  # DeepSpeed's accelerator warning goes to the log file


# ─── the memory plan (issue 26) ────────────────────────────────────────────────────────────────

def _terms(plan, phase):
    return {t["name"]: (t["phases"] or {}).get(phase, t["gib"]) for t in plan["memory_plan"]["terms"]}


@pytest.mark.parametrize("config, gpus", [(PAPER, 4), (PAPER_7B, 8)], ids=["1.5b-4xH100", "7b-8xH100"])
def test_both_paper_configs_fit_80gb_h100s_with_every_term_counted(config, gpus):
    plan = dry_run.plan(RunConfig.from_yaml(config), gpus_per_node=gpus, device="H100-80GB")
    mp = plan["memory_plan"]
    assert mp["fits"] and mp["peak_gib"] <= mp["capacity_gib"] == pytest.approx(81559 / 1024)
    # the paper's batch: 128 prompts x 5 samples, 3,072-token responses, one optimizer update per step
    assert plan["tokens"]["rollouts_per_step"] == 640 and plan["tokens"]["optimizer_updates_per_step"] == 1
    assert plan["config"]["train"]["max_tokens"] == 3072
    for phase, total in mp["phases_gib"].items():  # every phase is the sum of its terms
        assert sum(_terms(plan, phase).values()) == pytest.approx(total)
    t = plan["config"]["train"]
    assert t["gradient_checkpointing"] and t["rollout_sleep_level"] == 2 and not t["ref_offload"]
    engine = _terms(plan, "rollout")["engine"]
    assert engine == pytest.approx(t["rollout_memory_utilization"] * mp["capacity_gib"])  # vLLM's share, awake
    asleep = _terms(plan, "update")["engine"]  # asleep during the update: what sleep keeps, CUDA graphs included
    assert asleep == pytest.approx(mem.VLLM_ASLEEP_GIB + mem.VLLM_CUDAGRAPH_GIB) and asleep < engine / 10
    assert _terms(plan, "update")["reference"] > 0  # on the GPU, not on the CPU


def test_the_export_moment_adds_one_gathered_module_under_zero3_and_nothing_below():
    """The checkpoint's export runs with the engine awake. ZeRO-3 gathers one module at a time (the largest: the
    7B's untied embedding or LM head, 152,064 x 3,584 bf16 = 1.02 GiB), not the whole 14.2 GiB model; ZeRO-2's
    weights are whole already."""
    p7 = dry_run.plan(RunConfig.from_yaml(PAPER_7B), gpus_per_node=8, device="H100-80GB")
    mp = p7["memory_plan"]
    gathered = 2 * p7["model"]["largest_layer"] / 1024 ** 3
    assert p7["model"]["largest_layer"] == 152064 * 3584
    assert mp["phases_gib"]["export"] == pytest.approx(mp["phases_gib"]["rollout"] + gathered)
    assert _terms(p7, "export")["export gather"] == pytest.approx(gathered) and _terms(p7, "rollout")["export gather"] == 0
    assert "the whole model at once would add 14.2 GiB" in next(t for t in mp["terms"] if t["name"] == "export gather")["how"]
    p15 = dry_run.plan(RunConfig.from_yaml(PAPER), gpus_per_node=4, device="H100-80GB")
    assert p15["memory_plan"]["phases_gib"]["export"] == pytest.approx(p15["memory_plan"]["phases_gib"]["rollout"])


def test_the_engine_term_takes_vllms_profile_pass_and_cuda_graphs_off_the_kv_cache():
    """vLLM sizes its KV cache after a profile forward over max_num_batched_tokens; a smaller batch leaves more
    KV cache in the same share, and the plan says how much the profile took."""
    cfg = RunConfig.from_yaml(PAPER_7B)
    big = dry_run.plan(cfg, gpus_per_node=8, device="H100-80GB")
    engine = next(t for t in big["memory_plan"]["terms"] if t["name"] == "engine")["how"]
    shape = mem.ModelShape(params=1, largest_layer=1, layers=28, hidden=3584, vocab=152064, kv_dim=512,
                           intermediate=18944)
    default = mem.vllm_profile_bytes(shape, 2, None, None)  # vLLM's own batch sizes: 16,384 tokens, 1,024 rows
    assert default == 16384 * (2 * 18944 + 4 * 3584) * 2 + 1024 * 152064 * 8
    t = big["config"]["train"]  # the paper config sets the batch: 8,192 tokens, 256 sequences
    assert (t["rollout_max_num_batched_tokens"], t["rollout_max_num_seqs"]) == (8192, 256)
    profile = mem.vllm_profile_bytes(shape, 2, 8192, 256)
    assert profile == 8192 * (2 * 18944 + 4 * 3584) * 2 + 256 * 152064 * 8 and profile < default / 2
    assert f"profile pass at its batch {profile / 1024 ** 3:.2f} GiB" in engine


def test_the_7b_config_is_zero3_on_the_shipped_7b_config():
    plan = dry_run.plan(RunConfig.from_yaml(PAPER_7B), gpus_per_node=8)
    m = plan["model"]
    config = json.loads(Path(m["config_path"]).read_text())
    assert m["name"] == "Qwen/Qwen2.5-Math-7B" and m["total"] == qwen2_parameters(config)
    assert 7.6e9 < m["total"] < 7.7e9 and not m["tie_word_embeddings"]
    assert plan["deepspeed"]["zero_optimization"] == {"stage": 3} and plan["deepspeed"]["train_batch_size"] == 640
    p = m["total"]  # ZeRO-3 without offload (DeepSpeed 0.19.8): the largest layer x 4 B + 18 B/param over 8 GPUs
    assert plan["memory"]["model_states_gpu_gib"] * 1024 ** 3 == pytest.approx(4 * m["largest_layer"] + int(18 * p / 8),
                                                                              abs=1)
    ref = _terms(plan, "update")["reference"] * 1024 ** 3
    assert ref == pytest.approx(2 * p / 8 + 2 * m["largest_layer"])  # partitioned, one layer gathered


def test_an_oversized_config_does_not_fit_and_names_the_term_and_the_fix():
    cfg = RunConfig.from_yaml(PAPER)
    cfg.train.micro_batch_size, cfg.train.mini_batch_size, cfg.train.gradient_checkpointing = 64, 160, False
    cfg.train.mini_batch_size = 128
    cfg.algorithm.n_samples = 4  # 128 prompts x 4 / 4 GPUs = 128 rollouts per rank, a multiple of 64
    plan = dry_run.plan(cfg, gpus_per_node=4, device="H100-80GB")
    mp = plan["memory_plan"]
    assert not mp["fits"] and mp["peak_phase"] == "update"
    terms = _terms(plan, "update")
    assert max(terms, key=terms.get) == "activations"
    first = mp["fixes"][0]  # the largest term's fix first, re-planned: what it would give
    assert first["change"] == {"gradient_checkpointing": True} and first["peak_gib"] < mp["peak_gib"] / 2
    assert {"micro_batch_size": 32} in [f["change"] for f in mp["fixes"]]
    text = "\n".join(dry_run.render_memory(mp))
    assert "DOES NOT FIT" in text and "train.gradient_checkpointing: true" in text and "activations" in text


def test_ref_offload_is_planned_on_the_cpu_with_its_time_per_step():
    cfg = RunConfig.from_yaml(PAPER)
    cfg.train.ref_offload = True
    mp = dry_run.plan(cfg, gpus_per_node=4)["memory_plan"]
    assert _terms({"memory_plan": mp}, "update")["reference"] == 0
    r = mp["reference_cpu_seconds_per_step"]
    assert r["tokens"] == 160 * (mp["inputs"]["prompt_tokens"] + 3072) and r["seconds"] > 60
    assert "WARNING: ref_offload" in "\n".join(dry_run.render_memory(mp))


def test_cli_json_is_the_plan(tmp_path):
    r = subprocess.run([sys.executable, "-m", "prl_cli", "train", "--config", str(PAPER_7B), "--dry-run",
                        "--gpus-per-node", "8", "--device", "H200-141GB", "--format", "json", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    assert plan["memory_plan"]["device"] == "H200-141GB" and plan["memory_plan"]["fits"]
    assert {t["name"] for t in plan["memory_plan"]["terms"]} == {"model states", "reference", "engine", "activations",
                                                                 "log-prob chunk", "overhead", "export gather"}
    # a hub id is planned from its shipped config, and the command says how a run gets the weights (issue 29)
    assert "note: Qwen/Qwen2.5-Math-7B is a hub id" in r.stderr and "prl downloads nothing" in r.stderr
    assert "hf download Qwen/Qwen2.5-Math-7B --local-dir models/Qwen2.5-Math-7B" in r.stderr


@pytest.mark.parametrize("env, expected", [({}, 4 << 20), ({"MALLOC_MMAP_THRESHOLD_": "65536"}, 65536)])
def test_a_cpu_trainer_pins_the_mmap_threshold_unless_the_user_set_one(env, expected):
    import os

    code = "from prl.training.memory import host_mmap_threshold; print(host_mmap_threshold())"
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, check=True)
    assert int(out.stdout.split()[-1]) == expected


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_layer_probe_without_computing_matches_the_computed_probe_at_lengths_past_the_kernels_scratch(dtype):
    """The probe's shapes-only pass (matrix products and fused attention allocate, uninitialised, and compute
    nothing: the dry run's probe) at its short default lengths gives, every field, the bytes per token of a
    computed probe at 256-1,024 tokens, on a Qwen2 layer small enough to compute in either dtype anywhere. A
    computed probe at the short lengths is not the reference: on a CPU with AMX its bfloat16 attention's
    blocked work buffers lowered the per-token peaks there by 25-35 % (measured on a Xeon with AMX;
    docs/architecture.md §The layer probe counts tensors, not a CPU's kernels); past them both are equal."""
    import torch
    from transformers import Qwen2Config

    from prl.training.memory import probe_layer

    cfg = Qwen2Config(hidden_size=256, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=2,
                      num_hidden_layers=2, vocab_size=1000)
    dt = getattr(torch, dtype)
    shapes_only = probe_layer(cfg, dt)
    computed = probe_layer(cfg, dt, tokens=(256, 768), backward_tokens=(512, 1024), compute=True)
    assert computed.computed and not shapes_only.computed
    fields = ("saved", "saved_checkpointed", "nograd", "backward", "backward_checkpointed")
    assert {f: getattr(shapes_only, f) for f in fields} == {f: getattr(computed, f) for f in fields}
    assert computed.saved > computed.saved_checkpointed > 0 and computed.backward > 0
    # shapes-only is linear in length: the same figures from other lengths
    longer = probe_layer(cfg, dt, tokens=(64, 192), backward_tokens=(128, 384))
    assert {f: getattr(longer, f) for f in fields} == {f: getattr(shapes_only, f) for f in fields}
