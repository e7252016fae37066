"""Generation engines (vLLM and transformers) on the embedded tiny model: real components, no mocks.

One vLLM engine is started for the whole file (module-scoped fixture used by ``TestVLLM``, ~20 s);
everything else uses the transformers engine. Log-probs are compared with a plain transformers
forward pass over prompt + generated tokens; in float32 the largest difference measured was
~1.5e-6 (both engines), so the tolerance is 1e-4.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from prl.data import synthetic
from prl.generation.engines import EngineError, PromptError, Sample, SamplingConfig, make_engine
from prl.generation.engines.base import prompt_seeds
from prl.generation.generate import GenerateInputError, manifest_path, read_problems, run_generate
from prl_cli.main import build_parser, main as prl_main
from prl.models.tiny import TinyModelSpec, build_tiny

LOGPROB_TOL = 1e-4
CONTEXT = 512  # max_position_embeddings of the tiny model these tests build


# ------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    # a 512-token context keeps the context-limit tests small (the default tiny model has 4096)
    return build_tiny(tmp_path_factory.mktemp("engines") / "tiny", seed=0, spec=TinyModelSpec(max_position_embeddings=CONTEXT))


@pytest.fixture(scope="module")
def perturbed(tiny, tmp_path_factory) -> Path:
    """The tiny model with every weight moved (embeddings, tied LM head included), as a trainer saves it."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32)
    gen = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    out = tmp_path_factory.mktemp("engines") / "step1"
    model.save_pretrained(out)  # weights + config only: what a training step writes
    return out


@pytest.fixture(scope="module")
def hf(tiny):
    engine = make_engine("hf", tiny, batch_size=64)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts(hf) -> list[str]:
    return hf.build_prompts([r["problem"] for r in synthetic.generate("test", 6)])


_REF_MODELS: dict[str, object] = {}


def ref_model(model_dir: Path):
    from transformers import AutoModelForCausalLM

    key = str(model_dir)
    if key not in _REF_MODELS:
        _REF_MODELS[key] = AutoModelForCausalLM.from_pretrained(key, dtype=torch.float32).eval()
    return _REF_MODELS[key]


def forward_logprobs(model_dir: Path, prompt_ids: list[int], token_ids: list[int], *, temperature: float = 1.0,
                     top_p: float = 1.0) -> torch.Tensor:
    """log p(token_t | prompt, tokens_<t) of the sampling distribution, from one teacher-forced forward pass."""
    from transformers import TopPLogitsWarper

    full = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = ref_model(model_dir)(full).logits[0, len(prompt_ids) - 1: -1].float()
    if temperature > 0:
        logits = logits / temperature
        if top_p < 1:
            logits = TopPLogitsWarper(top_p)(None, logits)
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(token_ids)[:, None]).squeeze(1)


def check_samples(samples: list[Sample], engine, prompts: list[str], sampling: SamplingConfig) -> None:
    ids = engine.encode(prompts)
    assert [(s.prompt_index, s.sample_index) for s in samples] == [
        (i, j) for i in range(len(prompts)) for j in range(sampling.n)]
    eos = engine.tokenizer.eos_token_id
    for s in samples:
        assert s.prompt_tokens == len(ids[s.prompt_index])
        assert s.n_tokens == len(s.token_ids) >= 1
        assert s.n_tokens <= sampling.max_tokens
        assert s.finish_reason in ("stop", "length")
        if sampling.logprobs:
            assert len(s.logprobs) == s.n_tokens
            assert all(lp <= 1e-6 for lp in s.logprobs)
        else:
            assert s.logprobs is None
        if s.finish_reason == "length":
            assert s.n_tokens == min(sampling.max_tokens, CONTEXT - s.prompt_tokens)
        elif not sampling.stop:
            assert s.token_ids[-1] == eos and eos not in s.token_ids[:-1]
        if not sampling.stop:
            assert s.text == engine.tokenizer.decode(s.token_ids, skip_special_tokens=True,
                                                     clean_up_tokenization_spaces=False)


def check_logprobs(samples: list[Sample], engine, prompts, model_dir: Path, sampling: SamplingConfig) -> float:
    ids = engine.encode(prompts)
    worst = 0.0
    for s in samples:
        ref = forward_logprobs(model_dir, ids[s.prompt_index], s.token_ids, temperature=sampling.temperature,
                               top_p=sampling.top_p)
        worst = max(worst, (torch.tensor(s.logprobs) - ref).abs().max().item())
    assert worst < LOGPROB_TOL, worst
    return worst


def check_stop_strings(samples: list[Sample], engine, stop: tuple[str, ...]) -> int:
    stopped = 0
    for s in samples:
        decoded = engine.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        assert not any(x in s.text for x in stop), s
        if s.finish_reason == "stop" and s.token_ids[-1] != engine.tokenizer.eos_token_id:
            stopped += 1
            # the stop string was completed by the last token and cut from the text
            assert any(x in decoded for x in stop)
            assert not any(x in engine.tokenizer.decode(s.token_ids[:-1], skip_special_tokens=True) for x in stop)
            assert decoded.startswith(s.text)
            assert any(decoded[len(s.text):].startswith(x) for x in stop)
    return stopped


def long_prompt(tokenizer, n_tokens: int) -> str:
    """A prompt of exactly ``n_tokens`` tokens."""
    text, filler = "", " 7"
    while len(tokenizer(text + filler, add_special_tokens=False)["input_ids"]) <= n_tokens:
        text += filler
    for extra in ("", "1", "12", "x"):
        if len(tokenizer(text + extra, add_special_tokens=False)["input_ids"]) == n_tokens:
            return text + extra
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    out = tokenizer.decode(ids)
    assert len(tokenizer(out, add_special_tokens=False)["input_ids"]) == n_tokens
    return out


# ------------------------------------------------------------------------------------------------
# SamplingConfig and errors


@pytest.mark.parametrize("kwargs, field", [
    ({"n": 0}, "n"), ({"n": 1.5}, "n"), ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": True}, "max_tokens"), ({"stop": "\n\n"}, "stop"),
    ({"stop": ("",)}, "stop"), ({"stop": (3,)}, "stop"), ({"seed": -1}, "seed"), ({"logprobs": 1}, "logprobs"),
])
def test_sampling_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=rf"SamplingConfig\.{field}:"):
        SamplingConfig(**kwargs)


def test_sampling_config_defaults_are_the_papers():
    s = SamplingConfig(stop=["\n\n"])
    assert (s.n, s.temperature, s.top_p, s.max_tokens, s.stop) == (8, 1.0, 1.0, 3072, ("\n\n",))
    assert SamplingConfig(temperature=0).greedy
    assert json.loads(json.dumps(s.to_dict()))["stop"] == ["\n\n"]


def test_prompt_seeds_depend_on_content_not_position():
    a, b = [1, 2, 3], [4, 5]
    s1 = prompt_seeds(0, [a, b])
    assert prompt_seeds(0, [b, a]) == s1[::-1]
    dup = prompt_seeds(0, [a, a])
    assert dup[0] == s1[0] and dup[1] != dup[0]
    assert prompt_seeds(1, [a])[0] != s1[0]
    assert all(0 <= s < 2**62 for s in s1)


def test_unknown_engine_kind(tiny):
    with pytest.raises(EngineError, match="engine: expected one of"):
        make_engine("llama.cpp", tiny)


@pytest.mark.parametrize("kind", ["hf", "vllm"])
def test_missing_model_directory(kind, tmp_path):
    with pytest.raises(EngineError, match="does not exist"):
        make_engine(kind, tmp_path / "nope")


def test_model_directory_without_tokenizer(tiny, tmp_path):
    d = tmp_path / "no_tok"
    shutil.copytree(tiny, d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(EngineError, match="no tokenizer files"):
        make_engine("hf", d)


def _without_chat_template(tiny: Path, d: Path) -> Path:
    shutil.copytree(tiny, d)
    (d / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def test_model_without_chat_template(tiny, tmp_path):
    """A model without a chat template gets the documented plain format (prl.generation.prompts), recorded
    as such with its hash; an engine that requires a template refuses it before anything starts."""
    from prl.generation.prompts import PLAIN_TEMPLATE, SYSTEM_PROMPT, USER_SUFFIX, template_hash

    d = _without_chat_template(tiny, tmp_path / "no_template")
    with pytest.raises(PromptError, match="no chat template"):
        make_engine("hf", d, require_chat_template=True)
    engine = make_engine("hf", d)
    [prompt] = engine.build_prompts(["What is 1+1?"])
    bos = engine.tokenizer.bos_token or ""
    assert prompt == f"{bos}{SYSTEM_PROMPT}\n\nWhat is 1+1?{USER_SUFFIX}\n\n"
    assert engine.prompt_format == "plain" and engine.template_hash() == template_hash(engine.tokenizer)
    problems = synthetic.write_jsonl(synthetic.generate("test", 2), tmp_path / "p.jsonl")
    manifest = run_generate(d, problems, tmp_path / "out.jsonl", engine=engine, n=1, max_tokens=4, log=None,
                            progress=False)
    assert manifest["prompt"]["format"] == "plain" and manifest["prompt"]["template"] == PLAIN_TEMPLATE
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2
    assert make_engine("hf", tiny).prompt_format == "chat_template"


def test_vllm_cpu_rejects_small_head_dim(tiny, tmp_path):
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the head_dim limit is vLLM CPU's")
    d = tmp_path / "hd16"
    shutil.copytree(tiny, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(head_dim=16, num_attention_heads=8, num_key_value_heads=4)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match=r"head_dim=16.*>= 32.*use engine 'hf'"):
        make_engine("vllm", d)


def test_prompt_longer_than_context(hf, prompts):
    too_long = long_prompt(hf.tokenizer, CONTEXT + 3)
    with pytest.raises(EngineError, match=rf"prompt 1 is {CONTEXT + 3} tokens long but the context "
                                          rf"\(max_model_len\) is {CONTEXT}"):
        hf.generate([prompts[0], too_long], SamplingConfig(n=1, max_tokens=4))
    with pytest.raises(EngineError, match=rf"prompt 0 is {CONTEXT} tokens long"):
        hf.generate([long_prompt(hf.tokenizer, CONTEXT)], SamplingConfig(n=1, max_tokens=4))


def test_bad_engine_arguments(tiny):
    with pytest.raises(EngineError, match="dtype"):
        make_engine("hf", tiny, dtype="float8")
    with pytest.raises(EngineError, match="max_model_len=4096 exceeds"):
        make_engine("hf", tiny, max_model_len=CONTEXT * 8)
    with pytest.raises(EngineError, match="batch_size"):
        make_engine("hf", tiny, batch_size=0)
    with pytest.raises(EngineError, match="engine 'hf' does not take gpu_memory_utilization"):
        make_engine("hf", tiny, gpu_memory_utilization=0.2)


# ------------------------------------------------------------------------------------------------
# transformers engine


def test_hf_samples_shapes_and_logprobs(hf, prompts, tiny):
    sampling = SamplingConfig(n=4, max_tokens=40, seed=1)
    samples = hf.generate(prompts, sampling)
    check_samples(samples, hf, prompts, sampling)
    assert {s.finish_reason for s in samples} == {"stop", "length"}  # the random model emits EOS sometimes
    check_logprobs(samples, hf, prompts, tiny, sampling)


def test_hf_logprobs_follow_temperature_and_top_p(hf, prompts, tiny):
    sampling = SamplingConfig(n=2, max_tokens=16, temperature=0.7, top_p=0.9, seed=2)
    samples = hf.generate(prompts, sampling)
    check_samples(samples, hf, prompts, sampling)
    check_logprobs(samples, hf, prompts, tiny, sampling)


def test_hf_raw_logprobs_mode(tiny, prompts):
    engine = make_engine("hf", tiny, logprobs_mode="raw")
    sampling = SamplingConfig(n=2, max_tokens=12, temperature=0.7, top_p=0.9, seed=2)
    samples = engine.generate(prompts[:2], sampling)
    ids = engine.encode(prompts[:2])
    for s in samples:
        ref = forward_logprobs(tiny, ids[s.prompt_index], s.token_ids)  # the model's own distribution
        assert (torch.tensor(s.logprobs) - ref).abs().max().item() < LOGPROB_TOL
    assert engine.info()["logprobs_mode"] == "raw"


def test_hf_max_tokens_and_ignore_eos(hf, prompts):
    sampling = SamplingConfig(n=4, max_tokens=7, ignore_eos=True, logprobs=False)
    samples = hf.generate(prompts, sampling)
    check_samples(samples, hf, prompts, sampling)
    assert all(s.finish_reason == "length" and s.n_tokens == 7 for s in samples)


def test_hf_stop_strings(hf, prompts):
    sampling = SamplingConfig(n=4, max_tokens=40, stop=("e", "7"), seed=3)
    samples = hf.generate(prompts, sampling)
    check_samples(samples, hf, prompts, sampling)
    assert check_stop_strings(samples, hf, sampling.stop) >= 5


def test_hf_same_seed_same_samples(hf, prompts):
    sampling = SamplingConfig(n=2, max_tokens=12, seed=5)
    a = hf.generate(prompts, sampling)
    b = hf.generate(prompts, sampling)
    c = hf.generate(prompts, SamplingConfig(n=2, max_tokens=12, seed=6))
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.logprobs for s in a] == [s.logprobs for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]


def test_hf_batches_split_whole_prompts(tiny, prompts):
    engine = make_engine("hf", tiny, batch_size=4)  # 2 prompts x 2 samples per generate call
    sampling = SamplingConfig(n=2, max_tokens=8, seed=0)
    samples = engine.generate(prompts, sampling)
    check_samples(samples, engine, prompts, sampling)
    greedy = SamplingConfig(n=1, temperature=0, max_tokens=8)
    assert [s.token_ids for s in engine.generate(prompts, greedy)] == [
        s.token_ids for s in make_engine("hf", tiny, batch_size=256).generate(prompts, greedy)]


def test_hf_context_limit_ends_with_length(hf):
    prompt = long_prompt(hf.tokenizer, CONTEXT - 5)
    [s] = hf.generate([prompt], SamplingConfig(n=1, max_tokens=50, ignore_eos=True))
    assert (s.n_tokens, s.finish_reason) == (5, "length")


def test_hf_update_weights(tiny, perturbed, prompts, tmp_path):
    engine = make_engine("hf", tiny)
    greedy = SamplingConfig(n=1, temperature=0, max_tokens=16)
    before = engine.generate(prompts, greedy)
    engine.update_weights(perturbed)
    after = engine.generate(prompts, greedy)
    assert [s.token_ids for s in before] != [s.token_ids for s in after]
    check_logprobs(after, engine, prompts, perturbed, greedy)
    model = ref_model(perturbed)  # plain transformers greedy on the new weights
    for s, ids in zip(after, engine.encode(prompts)):
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=16,
                             eos_token_id=engine.tokenizer.eos_token_id, pad_token_id=0)
        assert out[0, len(ids):].tolist() == s.token_ids
    info = engine.info()
    assert info["weights_path"] == str(perturbed.resolve()) and info["weight_updates"] == 1
    # weights only (no config.json): copied into the running model, same result
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(perturbed / "model.safetensors", bare)
    other = make_engine("hf", tiny)
    other.update_weights(bare)
    assert [s.token_ids for s in other.generate(prompts, greedy)] == [s.token_ids for s in after]


def test_update_weights_errors(hf, tiny, tmp_path):
    with pytest.raises(EngineError, match="does not exist"):
        hf.update_weights(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngineError, match="no \\*.safetensors"):
        hf.update_weights(tmp_path / "empty")
    d = tmp_path / "other"
    shutil.copytree(tiny, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 2
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match="num_hidden_layers=2 differs"):
        hf.update_weights(d)


# ------------------------------------------------------------------------------------------------
# prl generate (input checks, files, CLI) with the transformers engine


def test_read_problems_reports_file_line_and_field(tmp_path):
    f = tmp_path / "p.jsonl"
    cases = [
        ('{"problem": "1+1"}\n\n{"problem": 3}\n', r"p\.jsonl:3: field 'problem' must be a string"),
        ('{"problem": "1+1"}\n{"question": "x"}\n', r"p\.jsonl:2: field 'problem' is missing"),
        ('{"problem": "1+1"}\n{"problem": "2+2"\n', r"p\.jsonl:2: not valid JSON"),
        ('["problem"]\n', r"p\.jsonl:1: expected a JSON object"),
        ('{"problem": "  "}\n', r"p\.jsonl:1: field 'problem' is empty"),
        ("\n\n", r"no problems"),
    ]
    for text, pattern in cases:
        f.write_text(text)
        with pytest.raises(GenerateInputError, match=pattern):
            read_problems(f)
    f.write_bytes(b'{"problem": "ok"}\n{"problem": "\xff"}\n')
    with pytest.raises(GenerateInputError, match=r"p\.jsonl:2: not valid UTF-8"):
        read_problems(f)
    with pytest.raises(GenerateInputError, match="not found"):
        read_problems(tmp_path / "missing.jsonl")


def test_run_generate_writes_samples_and_manifest(tiny, tmp_path):
    records = synthetic.generate("test", 5)
    problems = synthetic.write_jsonl(records, tmp_path / "p.jsonl")
    out = tmp_path / "run" / "samples.jsonl"
    manifest = run_generate(tiny, problems, out, engine="hf", n=3, max_tokens=16, seed=4, log=None, progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 15
    assert [(r["problem_index"], r["sample_index"]) for r in rows] == [(i, j) for i in range(5) for j in range(3)]
    assert rows[3]["problem_id"] == records[1]["id"] and rows[3]["answer"] == records[1]["answer"]
    for r in rows:
        assert len(r["token_ids"]) == len(r["logprobs"]) == r["n_tokens"] <= 16
        assert r["finish_reason"] in ("stop", "length")
        assert r["prompt"].endswith("<|im_start|>assistant\n") and "\\boxed{}" in r["prompt"]
    on_disk = json.loads(manifest_path(out).read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    assert on_disk["engine"]["engine"] == "hf" and on_disk["engine"]["engine_version"]
    assert on_disk["sampling"] == {"n": 3, "temperature": 1.0, "top_p": 1.0, "max_tokens": 16, "stop": [],
                                   "seed": 4, "logprobs": True, "ignore_eos": False}
    assert len(on_disk["prompt"]["template_sha256"]) == 64
    assert on_disk["packages"]["torch"] and on_disk["packages"]["transformers"]
    assert on_disk["n_samples"] == 15 and on_disk["generated_tokens"] == sum(r["n_tokens"] for r in rows)
    # same seed -> same file
    run_generate(tiny, problems, tmp_path / "again.jsonl", engine="hf", n=3, max_tokens=16, seed=4, log=None,
                 progress=False)
    assert (tmp_path / "again.jsonl").read_text() == out.read_text()


def test_generate_cli(tiny, tmp_path, capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--help"])
    helptext = capsys.readouterr().out
    for flag in ("--model", "--prompts", "--n", "--engine", "--out", "--temperature", "--top-p", "--max-tokens",
                 "--seed", "{vllm,hf}"):
        assert flag in helptext
    problems = synthetic.write_jsonl(synthetic.generate("test", 3), tmp_path / "p.jsonl")
    out = tmp_path / "s.jsonl"
    args = ["--model", str(tiny), "--prompts", str(problems), "--out", str(out), "--engine", "hf", "--n", "2",
            "--max-tokens", "8", "--quiet"]
    assert prl_main(["generate", *args]) == 0
    assert len(out.read_text().splitlines()) == 6 and manifest_path(out).exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x"}\n{"id": 2}\n')
    assert prl_main(["generate", "--model", str(tiny), "--prompts", str(bad), "--out", str(out), "--engine", "hf"]) == 2
    assert "bad.jsonl:2: field 'problem' is missing" in capsys.readouterr().err
    assert prl_main(["generate", "--model", str(tmp_path / "nope"), "--prompts", str(problems), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# vLLM: one engine for the whole file


@pytest.fixture(scope="module")
def vllm(tiny):
    """The file's one vLLM engine; only TestVLLM (the last tests in the file) uses it."""
    pytest.importorskip("vllm")
    sentinel = _ClosingRecorder()
    logging.getLogger("prl-test-sentinel").addHandler(sentinel)
    engine = make_engine("vllm", tiny)
    engine.sentinel = sentinel
    yield engine
    engine.close()
    logging.getLogger("prl-test-sentinel").removeHandler(sentinel)


class _ClosingRecorder(logging.Handler):
    """A handler that records being flushed or closed (what logging.config.dictConfig does to every handler)."""

    def __init__(self):
        super().__init__()
        self.touched: list[str] = []

    def flush(self):
        self.touched.append("flush")

    def close(self):
        self.touched.append("close")
        super().close()

    def emit(self, record):
        pass


@pytest.mark.e2e
class TestVLLM:

    def test_starting_leaves_the_process_logging_alone(self, vllm):
        """vLLM's dictConfig flushed and closed every handler under logging's lock: inside a Prefect flow
        that deadlocked with Prefect's API log handler. Starting the engine must not touch other handlers."""
        assert vllm.sentinel.touched == []
        assert any(getattr(h, "_prl_vllm", False) for h in logging.getLogger("vllm").handlers)

    def test_info(self, vllm, tiny):
        info = vllm.info()
        assert info["engine"] == "vllm" and info["engine_version"]
        assert info["max_model_len"] == CONTEXT and info["dtype"] == "float32"
        assert info["model_path"] == str(tiny.resolve())

    def test_samples_shapes_and_logprobs(self, vllm, prompts, tiny):
        sampling = SamplingConfig(n=4, max_tokens=40, seed=1)
        samples = vllm.generate(prompts, sampling)
        check_samples(samples, vllm, prompts, sampling)
        assert {s.finish_reason for s in samples} == {"stop", "length"}
        check_logprobs(samples, vllm, prompts, tiny, sampling)

    def test_logprobs_follow_temperature_and_top_p(self, vllm, prompts, tiny):
        sampling = SamplingConfig(n=2, max_tokens=16, temperature=0.7, top_p=0.9, seed=2)
        samples = vllm.generate(prompts, sampling)
        check_samples(samples, vllm, prompts, sampling)
        check_logprobs(samples, vllm, prompts, tiny, sampling)

    def test_greedy_matches_transformers(self, vllm, hf, prompts):
        greedy = SamplingConfig(n=1, temperature=0, max_tokens=20)
        a, b = vllm.generate(prompts, greedy), hf.generate(prompts, greedy)
        assert [(s.token_ids, s.text, s.finish_reason) for s in a] == [(s.token_ids, s.text, s.finish_reason) for s in b]
        assert max(abs(x - y) for s, t in zip(a, b) for x, y in zip(s.logprobs, t.logprobs)) < LOGPROB_TOL

    def test_max_tokens_stop_strings_and_context(self, vllm, hf, prompts):
        sampling = SamplingConfig(n=4, max_tokens=7, ignore_eos=True, logprobs=False)
        samples = vllm.generate(prompts, sampling)
        check_samples(samples, vllm, prompts, sampling)
        assert all(s.finish_reason == "length" and s.n_tokens == 7 for s in samples)
        sampling = SamplingConfig(n=4, max_tokens=40, stop=("e", "7"), seed=3)
        samples = vllm.generate(prompts, sampling)
        check_samples(samples, vllm, prompts, sampling)
        assert check_stop_strings(samples, vllm, sampling.stop) >= 5
        [s] = vllm.generate([long_prompt(vllm.tokenizer, CONTEXT - 5)], SamplingConfig(n=1, max_tokens=50,
                                                                                      ignore_eos=True))
        assert (s.n_tokens, s.finish_reason) == (5, "length")
        with pytest.raises(EngineError, match=rf"prompt 1 is {CONTEXT + 3} tokens long"):
            vllm.generate([prompts[0], long_prompt(vllm.tokenizer, CONTEXT + 3)], SamplingConfig(n=1))

    def test_seeds(self, vllm, prompts):
        sampling = SamplingConfig(n=3, max_tokens=16, temperature=0.8, seed=7)
        a = vllm.generate(prompts, sampling)
        other = vllm.generate(prompts, SamplingConfig(n=3, max_tokens=16, temperature=0.8, seed=8))
        b = vllm.generate(prompts[::-1], sampling)  # other order, after other calls
        assert [s.token_ids for s in a] != [s.token_ids for s in other]
        by_prompt = {(prompts[::-1][s.prompt_index], s.sample_index): s.token_ids for s in b}
        assert [s.token_ids for s in a] == [by_prompt[(prompts[s.prompt_index], s.sample_index)] for s in a]
        assert len({tuple(s.token_ids) for s in a}) > len(prompts)  # samples of one prompt differ

    def test_run_generate_with_running_engine(self, vllm, tiny, tmp_path):
        problems = synthetic.write_jsonl(synthetic.generate("test", 4), tmp_path / "p.jsonl")
        out = tmp_path / "s.jsonl"
        manifest = run_generate(tiny, problems, out, engine=vllm, n=2, max_tokens=12, log=None, progress=False)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 8 and manifest["engine"]["engine"] == "vllm"
        assert manifest["packages"]["vllm"] or manifest["packages"]["vllm-cpu"]

    def test_update_weights_in_place(self, vllm, hf, tiny, perturbed, prompts):
        """Runs last in the class: it changes the engine's weights (and puts them back)."""
        greedy = SamplingConfig(n=1, temperature=0, max_tokens=20)
        before = vllm.generate(prompts, greedy)
        vllm.update_weights(perturbed)
        after = vllm.generate(prompts, greedy)
        assert [s.token_ids for s in after] != [s.token_ids for s in before]
        hf_new = make_engine("hf", tiny)
        hf_new.update_weights(perturbed)
        expected = hf_new.generate(prompts, greedy)
        assert [s.token_ids for s in after] == [s.token_ids for s in expected]
        check_logprobs(after, vllm, prompts, perturbed, greedy)
        sampled = vllm.generate(prompts, SamplingConfig(n=2, max_tokens=16, seed=9))
        check_logprobs(sampled, vllm, prompts, perturbed, SamplingConfig(n=2, max_tokens=16))
        assert vllm.info()["weight_updates"] == 1
        vllm.update_weights(tiny)  # and back: the original outputs return
        assert [s.token_ids for s in vllm.generate(prompts, greedy)] == [s.token_ids for s in before]

    def test_update_weights_logs_no_warning(self, vllm, tiny, perturbed):
        """vLLM's layerwise reload warned "RotaryEmbedding: Failed to load weights" (a computed rope cache
        counted as loadable) and "ParallelLMHead: Failed to load weights" (the tied head, given no tensor)
        at every training step (issue 14). The worker captures vLLM's logger during the reload."""
        for weights in (perturbed, tiny):
            vllm.update_weights(weights)
            [report] = vllm.last_reload  # one worker
            assert report["warnings"] == [], report["warnings"]
            assert report["tied_heads_fed"] == ["lm_head.weight"] and "cos_sin_cache" in report["derived_buffers"]

    def test_load_weights_from_memory(self, vllm, tiny, perturbed, prompts):
        """The trainer's tensors straight into an in-process engine (issue 15: no save_pretrained, no
        files): greedy tokens and log-probs then equal transformers on the same weights, with no vLLM
        warning; an engine in separate processes refuses (its workers cannot see this process's tensors)."""
        from transformers import AutoModelForCausalLM

        from prl.training.weight_sync import named_weights

        model = AutoModelForCausalLM.from_pretrained(str(perturbed), dtype=torch.float32)
        named = named_weights(model)
        assert "lm_head.weight" not in dict(named)  # the tied head is the embedding: handed over once
        with pytest.raises(EngineError, match="separate processes"):
            vllm.load_weights(named)
        greedy = SamplingConfig(n=1, temperature=0, max_tokens=20)
        engine = make_engine("vllm", tiny, in_process=True)
        try:
            assert engine.loads_from_memory
            before = engine.generate(prompts, greedy)
            engine.load_weights(named)
            after = engine.generate(prompts, greedy)
            [report] = engine.last_reload
            assert report["warnings"] == [] and report["tied_heads_fed"] == ["lm_head.weight"]
            hf_new = make_engine("hf", tiny)
            hf_new.load_weights(named)
            expected = hf_new.generate(prompts, greedy)
            assert [s.token_ids for s in after] == [s.token_ids for s in expected]
            assert [s.token_ids for s in after] != [s.token_ids for s in before]
            check_logprobs(after, engine, prompts, perturbed, greedy)
            assert (engine.info()["weight_updates"], engine.info()["memory_updates"]) == (1, 1)
        finally:
            engine.close()
        # vLLM's CPU worker made torch.set_num_threads a no-op in this process; closing puts it back
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(before)
