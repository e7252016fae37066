"""Write PROVENANCE.md for the lm-eval fixture (called by make_fixture.sh with the lm-eval venv's python).

Everything in it is read from the files lm-eval wrote and from the environment that ran it; the field
descriptions are checked against the first samples row (a field lm-eval wrote that is not described here
is listed as such, and a described one it did not write is left out).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import hashlib
import importlib.metadata as md
import json
import os
import platform
import shlex
import sys
from pathlib import Path

FIELD_DOC = {
    "doc_id": "index of the document in the task's split (0-based, after lm-eval's own ordering; here the file order)",
    "doc": "the dataset row as lm-eval loaded it from the JSON-lines file (all its columns: id, problem, solution, answer, level)",
    "target": "doc_to_target(doc): the gold answer string (`{{answer}}`)",
    "arguments": "the doc's requests (Instances), as lm-eval's EvaluationTracker serialises them: an object {\"gen_args_0\": {\"arg_0\": context string (the chat-templated prompt), \"arg_1\": generation kwargs object}} (gen_args_<i> per request, arg_<j> per positional arg). With `repeats: 2` a generate_until doc still has ONE request",
    "resps": "one entry per request; each is the list of the model's raw generations for it, one per repeat (length 2 here)",
    "filtered_resps": "one entry per request: the output of this row's filter pipeline (take_first / majority_vote reduce the repeats to one string, e.g. the extracted boxed answer, or '[invalid]' when the regex found nothing)",
    "filter": "the name of the filter pipeline this row was scored with (one row per doc per filter)",
    "metrics": "names of the metric fields in this row",
    "doc_hash": "sha256 hex of json.dumps(doc, indent=2, ensure_ascii=False)",
    "prompt_hash": "sha256 hex of the first request's context string (arguments.gen_args_0.arg_0)",
    "target_hash": "sha256 hex of str(target)",
    "exact_match": "the per-row label: 1.0 if filtered_resps[0] == target (ignore_case), else 0.0; a float",
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def jtype(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, dict):
        return "object{" + ", ".join(f"{k}: {jtype(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        inner = sorted({jtype(x) for x in v})
        return f"list[{len(v)}] of " + (" | ".join(inner) if inner else "nothing")
    return type(v).__name__


def short(v, n=160) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "(not installed)"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--nested", nargs=2, required=True)
    ap.add_argument("--task-yaml", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--model-how", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--started", required=True)
    ap.add_argument("--env", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd

    out = Path(a.out)
    samples_path, results_path = Path(a.samples), Path(a.results)
    rows = [json.loads(line) for line in samples_path.read_text().splitlines() if line.strip()]
    results = json.loads(results_path.read_text())
    task = "prl_synth_arith"
    model = Path(a.model)

    def rel(s: str) -> str:
        env = os.path.relpath(a.env, a.repo)
        return s.replace(a.env, env).replace(a.work, "WORK")

    command = "cd WORK/run && " + " ".join(shlex.quote(rel(c)) for c in cmd)

    per_doc = collections.Counter(r["doc_id"] for r in rows)
    filters = list(dict.fromkeys(r["filter"] for r in rows))
    first = rows[0]
    lines: list[str] = []
    w = lines.append

    w("# lm-evaluation-harness `--log_samples` fixture: provenance\n")
    w("Written by `bench/peers/lm_eval/make_fixture.sh` (this file by its helper `provenance.py`). The samples and")
    w("results files here are lm-eval's own output, byte for byte, from the run described below; nothing in them")
    w("was edited. Regenerate with `bench/peers/lm_eval/make_fixture.sh --model DIR` (or without `--model`, to")
    w("build the model too). A rerun on the same machine, versions, model and data reproduced the responses exactly "
      "(CPU, one thread, fixed seeds); elsewhere sampled text may differ.\n")

    w("## Tool\n")
    w(f"- lm-eval (lm-evaluation-harness) **{version('lm_eval')}**, from PyPI (`lm-eval[hf]=={version('lm_eval')}`), "
      f"in its own venv `{os.path.relpath(a.env, a.repo)}`, hf backend (`--model hf`, transformers AutoModelForCausalLM)")
    w(f"- python {platform.python_version()}; torch {version('torch')}, transformers {version('transformers')}, "
      f"tokenizers {version('tokenizers')}, accelerate {version('accelerate')}, datasets {version('datasets')}, "
      f"huggingface-hub {version('huggingface_hub')}, numpy {version('numpy')}")
    w(f"- results json: lm_eval_version `{results.get('lm_eval_version')}`, git_hash `{results.get('git_hash')}`, "
      f"transformers_version `{results.get('transformers_version')}`\n")

    w("## Run\n")
    w(f"- date (UTC): started {a.started}, files written {dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}")
    w(f"- machine: {platform.system()} {platform.release()} {platform.machine()}, {cpu_model()}, "
      f"{os.cpu_count()} CPUs, CPU only (`--device cpu`), OMP/MKL threads 1")
    w("- environment: HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "
      "OMP_NUM_THREADS=1 (no hub access; model and data are local)")
    w("- command (`WORK` is the script's scratch folder, bench/out/lm_eval by default; the task YAML and the data "
      "file are copied into WORK/run first):\n")
    w("```sh\n" + command + "\n```\n")
    w("- prompt: **`--apply_chat_template` was used**, with `--system_instruction` = prl's SYSTEM_PROMPT, because "
      "that is the format `prl model sft` trained on (prl.generation.prompts.build_prompt: system turn + user turn "
      "`problem + \" Let's think step by step and output the final answer within \\\\boxed{}\"`, chat template, "
      "add_generation_prompt). Plain prompts are off-distribution for this model. The first row's context "
      "(`arguments.gen_args_0.arg_0`) is:\n")
    w("```text\n" + first["arguments"]["gen_args_0"]["arg_0"] + "\n```\n")

    w("- sampling: do_sample, **temperature 0.6**, top_p 1.0, top_k 0 (no top-k cut: transformers' default top_k=50 "
      "would otherwise apply), at most 200 new tokens (the model's max_position_embeddings is "
      f"{json.loads((Path(a.model) / 'config.json').read_text()).get('max_position_embeddings')}; in the first run "
      "prompts were 69-85 tokens and responses 15-44, all ending at <|im_end|>); lm-eval's default seeds `--seed 0,1234,1234,1234` (python, numpy, torch, fewshot)")
    w("- why 0.6 and not 1.0: the model is weak (prl's own sampled T=1 accuracy on these 20 problems is ~3%, greedy "
      "10%). When this fixture was first made, T=1.0 with the default seeds scored 0/20 on every filter (one correct "
      "response in 40, a second repeat), and torch seeds 1-6 at T=1.0 gave 0-1 of 20 first repeats right; T=0.6 with "
      "the default seeds gave 2/20, so that was kept. No other setting was searched.")
    w("- reproducibility check (when this fixture was first made): the script's default path from scratch (a new venv, "
      "the model built by `prl model build-tiny` + `prl model sft --steps 300 --threads 1`, the data by `prl data "
      "synth`) gave a model.safetensors with the same sha256 as below and samples rows identical to these.\n")

    w("## Task YAML (`bench/peers/lm_eval/task/prl_synth_arith.yaml`, copied as `WORK/run/tasks/`)\n")
    w("```yaml\n" + Path(a.task_yaml).read_text().rstrip() + "\n```\n")

    w("## Model\n")
    cfg = json.loads((model / "config.json").read_text())
    w(f"- {a.model_how}")
    w(f"- path at run time: `{rel(str(model))}` (its absolute path is what `pretrained=` and results json "
      "`model_name` / `config.model_args` show)")
    w(f"- {cfg.get('architectures')} ({cfg.get('model_type')}): hidden {cfg.get('hidden_size')}, layers "
      f"{cfg.get('num_hidden_layers')}, heads {cfg.get('num_attention_heads')}/{cfg.get('num_key_value_heads')} kv, "
      f"vocab {cfg.get('vocab_size')}, max_position_embeddings {cfg.get('max_position_embeddings')}, dtype float32")
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja"):
        if (model / name).exists():
            w(f"- sha256 `{name}`: `{sha256(model / name)}`")
    rep = model / "sft_report.json"
    if rep.exists():
        r = json.loads(rep.read_text())
        keep = {k: v for k, v in r.items() if not isinstance(v, (dict, list))}
        w(f"- sft_report.json (scalars): `{json.dumps(keep)}`")
    w("")

    w("## Data\n")
    w(f"- the first {a.n} lines of `{rel(a.data)}` (`prl data synth --out DIR --train 10` writes "
      "DIR/synth_test.jsonl), copied as `WORK/run/synth_test_20.jsonl`")
    w(f"- sha256 of those {a.n} lines: `{sha256(Path(a.work) / 'run' / 'synth_test_20.jsonl')}`\n")

    w("## Files\n")
    w("lm-eval wrote them nested, under `--output_path results`; they were copied here flat (names unchanged):\n")
    for nested in a.nested:
        w(f"- `{nested}` -> `{Path(nested).name}`")
    w("")
    w("| file | bytes | sha256 |\n| --- | --- | --- |")
    for p in (samples_path, results_path):
        w(f"| `{p.name}` | {p.stat().st_size} | `{sha256(p)}` |")
    w("")

    w("## Results (from the results json)\n")
    res = results["results"][task]
    w("| filter | exact_match | exact_match_stderr |\n| --- | --- | --- |")
    for f in filters:
        w(f"| {f} | {res.get(f'exact_match,{f}')} | {res.get(f'exact_match_stderr,{f}')} |")
    w(f"\nn-samples: `{json.dumps(results.get('n-samples', {}).get(task))}`; "
      f"results json top-level keys: {', '.join(f'`{k}`' for k in results)}\n")

    w("## The samples file\n")
    w(f"- {len(rows)} rows (JSON lines) = {len(per_doc)} docs x {len(filters)} filter pipelines "
      f"({', '.join(f'`{f}`' for f in filters)}): lm-eval writes **one row per (doc, filter)**, grouped by filter "
      "(all docs for the first filter, then the next), the same doc_id, doc, arguments and resps repeated in each.")
    nresp = collections.Counter(len(r["resps"][0]) for r in rows)
    w(f"- **repeats**: NOT one row per repeat. Each row has `resps` = [[response_1, response_2]] (one request per "
      f"doc, with its repeat generations as the inner list; inner lengths over all rows: "
      f"{', '.join(f'{k} in {v} rows' for k, v in sorted(nresp.items()))}); the filter reduces them: `take_first` scores "
      "only the first repeat, `majority_vote` votes over both. So the per-row label is per (doc, filter), and the "
      "second repeat's own correctness is not labelled by lm-eval (only its text, in resps[0][1]).")
    labels = collections.Counter((r["filter"], r.get("exact_match")) for r in rows)
    w(f"- label counts (filter, exact_match): `{dict(sorted(labels.items()))}`\n")
    w("Fields of one row (the first), in lm-eval's order, with JSON types:\n")
    w("| field | JSON type (first row) | meaning | first row's value |\n| --- | --- | --- | --- |")
    for k, v in first.items():
        meaning = FIELD_DOC.get(k, "(not described: a field this helper does not know)")
        val = short(v).replace("|", "\\|")
        w(f"| `{k}` | {jtype(v)} | {meaning} | `{val}` |")
    w("")
    w("Row 0 in full:\n")
    w("```json\n" + json.dumps(first, indent=2, ensure_ascii=False) + "\n```")
    (out / "PROVENANCE.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
