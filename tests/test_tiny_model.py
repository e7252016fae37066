"""The embedded tiny model: reproducible build, tokenizer round trip, loads in transformers,
vLLM (see test_engines.py) and DeepSpeed; the SFT warm start learns and survives save/load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import torch

from prl.data import synthetic
from prl.generation.prompts import build_prompt
from prl.models.tiny import build_tiny, check_tokenizer_round_trip, file_hashes


def test_same_seed_gives_byte_identical_files(tiny_model_dir, tmp_path):
    again = build_tiny(tmp_path / "again", seed=0)
    assert file_hashes(again) == file_hashes(tiny_model_dir)
    other = build_tiny(tmp_path / "other", seed=1)
    assert file_hashes(other)["model.safetensors"] != file_hashes(tiny_model_dir)["model.safetensors"]


def test_standard_hf_directory_llama_with_vllm_cpu_head_dim(tiny_model_dir):
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama"
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32


def test_autotokenizer_reproduces_training_ids(tiny_model_dir):
    from transformers import AutoTokenizer
    from tokenizers import Tokenizer

    check_tokenizer_round_trip(tiny_model_dir)  # raises on any difference
    auto = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))  # the file as trained
    for r in synthetic.generate("test", 20):
        text = build_prompt(auto, r["problem"]) + r["solution"]
        assert auto(text, add_special_tokens=False)["input_ids"] == raw.encode(text, add_special_tokens=False).ids
    assert "Qwen2" not in type(auto).__name__
    prompt = build_prompt(auto, "Mia has 7 shells.")
    assert prompt.endswith("<|im_start|>assistant\n") and "Please reason step by step" in prompt


def test_loads_and_runs_in_transformers(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    ids = tok("Mia has 7 shells.", return_tensors="pt")["input_ids"]
    logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok)) and torch.isfinite(logits).all()


def test_blank_line_steps_are_found_by_the_text_split(tiny_model_dir):
    """The tokenizer splits '\\n\\n' into two tokens; the text split still finds every step."""
    from transformers import AutoTokenizer

    from prl_core import step_boundaries

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for r in synthetic.generate("test", 12):
        ids = tok(r["solution"], add_special_tokens=False)["input_ids"]
        texts = [[tok.decode([i]) for i in ids]]
        bnd = step_boundaries(torch.ones(1, len(ids), dtype=torch.bool), "text:\\n\\n", token_texts=texts)
        assert int(bnd.sum()) == r["level"] + 1  # one per step line, plus the answer line's last token


DEEPSPEED_SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    import deepspeed
    from prl.training.distributed import without_cpu_shm_comm_op
    without_cpu_shm_comm_op()
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
           "zero_optimization": {"stage": 2}, "gradient_clipping": 1.0}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    ids = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(3):
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    print("LOSSES", losses)
""")


def test_loads_and_trains_under_deepspeed_on_cpu(tiny_model_dir, tmp_path):
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29561"}
    script = tmp_path / "ds.py"
    script.write_text(DEEPSPEED_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(tiny_model_dir)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    losses = json.loads(r.stdout.split("LOSSES", 1)[1].strip())
    assert losses[-1] < losses[0]  # three ZeRO-2 steps on one batch reduce its loss
