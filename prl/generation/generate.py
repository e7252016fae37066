"""``prl generate``: sample responses for a JSONL file of problems with either engine.

Input: JSONL, one object per line with a ``problem`` string (the bundled benchmarks and the
synthetic task use this schema; ``id``/``answer``/other fields are carried along). Output: one
JSONL line per sample, and ``<out stem>.manifest.json`` next to it with what is needed to
reproduce the run (engine and version, sampling settings, seed, chat-template hash, package
versions, git commit).

Engines that start worker processes (vLLM) need the caller's script to run under
``if __name__ == "__main__":``; the ``prl generate`` command does.
"""

from __future__ import annotations

from prl_core.errors import UserError
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from prl.generation.engines import ENGINE_KINDS, Engine, EngineError, SamplingConfig, check_model_dir, make_engine
from prl.manifest import run_manifest, sha256_file
from prl.generation.prompts import build_prompt, prompt_record, template_record

DEFAULT_MAX_TOKENS = SamplingConfig.max_tokens
"""The paper's evaluation length (``SamplingConfig``'s default)."""


class GenerateInputError(UserError, ValueError):
    """The prompts file cannot be used; the message names the file, line and field."""


def read_problems(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) for every non-blank line of a JSONL file of problems."""
    path = Path(path)
    if not path.is_file():
        raise GenerateInputError(f"{path}: prompts file not found")
    records: list[tuple[int, dict[str, Any]]] = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise GenerateInputError(f"{path}:{line_no}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise GenerateInputError(f"{path}:{line_no}: not valid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(rec, dict):
                raise GenerateInputError(
                    f"{path}:{line_no}: expected a JSON object with a 'problem' field, got {type(rec).__name__}")
            if "problem" not in rec:
                raise GenerateInputError(f"{path}:{line_no}: field 'problem' is missing (fields: {sorted(rec)})")
            problem = rec["problem"]
            if not isinstance(problem, str):
                raise GenerateInputError(
                    f"{path}:{line_no}: field 'problem' must be a string, got {type(problem).__name__}")
            if not problem.strip():
                raise GenerateInputError(f"{path}:{line_no}: field 'problem' is empty")
            records.append((line_no, rec))
    if not records:
        raise GenerateInputError(f"{path}: no problems (the file has no non-blank lines)")
    return records


def manifest_path(out_file: str | Path) -> Path:
    out = Path(out_file)
    return out.with_name(out.stem + ".manifest.json")


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_generate(model_dir: str | Path, prompts_file: str | Path, out_file: str | Path, *,
                 engine: str | Engine = "vllm", n: int = SamplingConfig.n,
                 temperature: float = SamplingConfig.temperature, top_p: float = SamplingConfig.top_p,
                 max_tokens: int = DEFAULT_MAX_TOKENS, seed: int = SamplingConfig.seed, stop: tuple[str, ...] = (),
                 dtype: str = "float32", max_model_len: int | None = None, limit: int | None = None,
                 engine_kwargs: dict[str, Any] | None = None, progress: bool = True,
                 log: Callable[[str], None] | None = _stderr) -> dict[str, Any]:
    """Generate ``n`` samples per problem of ``prompts_file`` and write them to ``out_file``.

    ``engine`` is 'vllm', 'hf' or an already running :class:`Engine` (reused, not closed; its
    model must be ``model_dir``). Everything that can be checked without the engine (inputs,
    sampling settings, model directory, chat template) is checked before it starts. Returns
    the manifest (also written to ``<out stem>.manifest.json``).
    """
    log = log or (lambda _msg: None)
    sampling = SamplingConfig(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
                              stop=tuple(stop), logprobs=True)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise GenerateInputError(f"limit: expected an integer >= 1, got {limit!r}")
    prompts_path, out_path = Path(prompts_file), Path(out_file)
    records = read_problems(prompts_path)
    if limit is not None:
        records = records[:limit]
    if isinstance(engine, Engine):
        if Path(model_dir).resolve() != engine.model_dir:
            raise EngineError(f"the running engine serves {engine.model_dir}, not {model_dir}")
        tokenizer = engine.tokenizer
    elif engine in ENGINE_KINDS:
        check_model_dir(model_dir)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    else:
        raise EngineError(f"engine: expected one of {ENGINE_KINDS} or an Engine, got {engine!r}")
    prompts = [build_prompt(tokenizer, rec["problem"]) for _, rec in records]

    own_engine = not isinstance(engine, Engine)
    t0 = time.perf_counter()
    if own_engine:
        log(f"starting engine '{engine}' on {model_dir} ...")
        eng = make_engine(engine, model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len,
                          **(engine_kwargs or {}))
    else:
        eng = engine
    start_s = time.perf_counter() - t0
    try:
        if own_engine:
            log(f"engine ready in {start_s:.1f} s; generating {len(prompts)} problems x {n} samples "
                f"(max {max_tokens} tokens, temperature {temperature}, top_p {top_p}, seed {seed})")
        t1 = time.perf_counter()
        samples = eng.generate(prompts, sampling, progress=progress)
        gen_s = time.perf_counter() - t1
        info = eng.info()
        template = template_record(eng.tokenizer)
    finally:
        if own_engine:
            eng.close()

    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    n_tokens = 0
    with tmp.open("w", encoding="utf-8") as f:
        for s in samples:
            line_no, rec = records[s.prompt_index]
            n_tokens += s.n_tokens
            row = {
                "problem_index": s.prompt_index,
                "problem_id": rec.get("id", rec.get("problem_id", s.prompt_index)),
                "line": line_no,
                "sample_index": s.sample_index,
                "prompt": prompts[s.prompt_index],
                "response": s.text,
                "finish_reason": s.finish_reason,
                "n_tokens": s.n_tokens,
                "prompt_tokens": s.prompt_tokens,
                "token_ids": s.token_ids,
                "logprobs": s.logprobs,
            }
            if "answer" in rec:
                row["answer"] = rec["answer"]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, out_path)

    config = {"model": str(Path(model_dir).resolve()), "prompts": str(prompts_path.resolve()), "out": str(out_path.resolve()),
              "engine": info.get("engine") if isinstance(info, dict) else None, "n": n, "temperature": temperature,
              "top_p": top_p, "max_tokens": max_tokens, "stop": list(stop), "dtype": dtype, "max_model_len": max_model_len,
              "limit": limit}
    manifest = {
        **run_manifest("generate", config=config, seed=seed),
        "model_dir": str(Path(model_dir).resolve()),
        "prompts_file": str(prompts_path.resolve()),
        "prompts_sha256": sha256_file(prompts_path),
        "out_file": str(out_path.resolve()),
        "n_problems": len(records),
        "n_samples": len(samples),
        "generated_tokens": n_tokens,
        "engine": info,
        "sampling": sampling.to_dict(),
        "prompt": prompt_record(template),
        "timing": {"engine_start_s": round(start_s, 3) if own_engine else None, "generate_s": round(gen_s, 3),
                   "generated_tokens_per_s": round(n_tokens / gen_s, 1) if gen_s > 0 else None},
    }
    mpath = manifest_path(out_path)
    mpath.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    finished = sum(s.finish_reason == "stop" for s in samples)
    log(f"wrote {len(samples)} samples ({n_tokens} tokens, {finished} stopped, {len(samples) - finished} hit "
        f"the length limit) to {out_path} in {gen_s:.1f} s; manifest {mpath}")
    return manifest
