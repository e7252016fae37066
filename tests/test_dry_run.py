"""`prl train --dry-run` (issue 15): the paper's Qwen2.5-Math-1.5B run planned offline, from the shipped
public config.json and the offline Qwen2.5 tokenizer, with DeepSpeed's own memory estimators."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prl_core.config import ConfigError

from prl.training import dry_run
from prl.training.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "configs" / "train" / "paper_qwen2.5_math_1.5b.yaml"
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
    assert mem["reference_on"] == "cpu" and mem["total_gpu_gib"] == mem["model_states_gpu_gib"]  # ref_offload: true
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
    assert "1.544 B parameters" in r.stdout and "ZeRO 2, bfloat16" in r.stdout and "'text:\\\\n\\\\n'" in r.stdout
    assert json.loads(out.read_text())["tokens"]["rollouts_per_step"] == 640
    assert not (tmp_path / "run").exists()  # nothing started, nothing written but the log beside it
    assert "WARNING" not in r.stderr  # DeepSpeed's accelerator warning goes to the log file
