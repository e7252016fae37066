"""Write PROVENANCE.md for the verl fixture from make_fixture.py's run record (runs in the verl venv)."""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
from pathlib import Path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def json_type(v) -> str:
    return {bool: "boolean", int: "integer", float: "number (float)", str: "string", type(None): "null",
            list: "array", dict: "object"}[type(v)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    rec = json.loads(Path(a.record).read_text())
    fixture, model, test = Path(a.fixture), Path(a.model), Path(a.test)
    if sha256(fixture) != rec["sha256"]:
        raise SystemExit(f"{fixture} is not the file verl wrote ({rec['dump']})")
    raw = fixture.read_bytes()
    rows = [json.loads(line) for line in raw.decode("utf-8").splitlines()]

    keys = list(rows[0])
    types: dict[str, set[str]] = {k: set() for k in keys}
    for r in rows:
        if list(r) != keys:
            raise SystemExit(f"rows differ in their keys: {list(r)} vs {keys}")
        for k, v in r.items():
            types[k].add(json_type(v))
    n = rec["rows"]
    samples = n // len(rec["val_problems"])
    grouped = all(
        len({(rows[i * samples + j]["input"], rows[i * samples + j]["gts"]) for j in range(samples)}) == 1
        for i in range(len(rec["val_problems"]))
    )
    n_pos = sum(r["score"] == 1 for r in rows)
    score_values = sorted({r["score"] for r in rows})
    same_reward = all(r["reward"] == r["score"] for r in rows)
    acc_matches = all(r["acc"] == (r["score"] == 1) for r in rows)
    crlf = b"\r\n" in raw
    non_ascii = {}
    for i, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        for ch in line:
            if ord(ch) > 127:
                non_ascii.setdefault(f"U+{ord(ch):04X}", set()).add(i)

    import verl
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    write_src = inspect.getsource(RayPPOTrainer._write_generations)
    dump_src = inspect.getsource(RayPPOTrainer._dump_generations)
    trainer_py = Path(ray_trainer.__file__)

    prl_model = json.loads((model / "prl_model.json").read_text()) if (model / "prl_model.json").exists() else {}
    sft = json.loads((model / "sft_report.json").read_text()) if (model / "sft_report.json").exists() else {}
    manifest = sft.get("manifest", {})
    cfg = json.loads((model / "config.json").read_text())
    v = rec["versions"]
    calls = rec["generate_calls"]
    resp_lens = [c["response_len"] for c in calls]
    finishes = sorted({c["finish"] for c in calls})

    field_notes = {
        "input": "the prompt: verl's `tokenizer.decode(prompt_ids, skip_special_tokens=True)` of the left-padded "
                 "prompt ids, so pad and special tokens (`<|im_start|>`, `<|im_end|>`) are gone and the chat "
                 "template shows as `user\\n...\\nassistant\\n`",
        "output": "the completion: `tokenizer.decode(response_ids, skip_special_tokens=True)`, EOS and padding removed",
        "gts": "`reward_model.ground_truth` of the data row (here the synthetic answer, a string)",
        "score": "`rm_scores.sum(-1)` (float32 tensor -> Python float); in this file math_dapo's dict also has a "
                 "`score` key, which `_write_generations` writes over the same column with the same value",
        "step": "`trainer.global_steps` at validation (0: `val_before_train`)",
        "reward": "added by `_validate` (`reward_extra_infos_dict[\"reward\"]`), equal to `score`",
        "acc": "reward extra info from math_dapo (`correct`, a bool)",
        "pred": "reward extra info from math_dapo: the extracted answer (`\\boxed{}` content here; "
                "`[INVALID]` when none is found)",
    }

    L = []
    L.append("# verl validation-generations dump: provenance\n")
    L.append(f"`{fixture.name}` is a file written by **verl {v['verl']}**'s own "
             "`RayPPOTrainer._dump_generations` -> `RayPPOTrainer._write_generations` (the dump behind "
             "`trainer.validation_data_dir`), byte for byte: it was not edited after verl wrote it, only copied "
             f"here. It is the input fixture for `prl import --format verl`.\n")
    L.append("Regenerate it (the whole tree, from a fresh clone) with\n")
    L.append("```\n" + a.command.strip() + "\n```\n")
    L.append("which makes `bench/.envs/verl`, installs verl, and runs `bench/peers/verl/make_fixture.py`; "
             "without `--model`/`--synth` it builds the model and the data with `prl` first. Re-running with "
             "the same model, data and versions reproduces the file bit for bit (checked: two runs, one sha256).\n")

    L.append("## The file\n")
    L.append(f"- name: `{fixture.name}` (verl names it `{{global_steps}}.jsonl`; global_steps = {rec['global_steps']})")
    L.append(f"- sha256: `{rec['sha256']}`")
    L.append(f"- {len(raw)} bytes, {n} lines, one JSON object per line, `\\n` line ends"
             f"{' (CRLF found!)' if crlf else ''}, UTF-8 written with `ensure_ascii=False`, keys in the order "
             "below, `json.dumps` default separators (`\", \"`, `\": \"`)")
    if non_ascii:
        L.append("- non-ASCII, written raw (not `\\u` escapes): " + "; ".join(
            f"{cp} on line{'s' if len(ls) > 1 else ''} {', '.join(map(str, sorted(ls)))}" for cp, ls in non_ascii.items())
            + (" (U+FFFD: the tiny model sometimes samples byte-level tokens that do not form valid UTF-8; "
               "`tokenizer.decode` turns the broken UTF-8 into the replacement character)" if "U+FFFD" in non_ascii
               else ""))
    else:
        L.append("- all ASCII")
    L.append(f"- written: {rec['date']} on {rec['platform']} ({rec['machine']}, {rec['cpu_count']} CPUs, "
             f"torch threads {rec['torch_threads']}), Python {rec['python']}, no GPU\n")

    L.append("### One row\n")
    L.append("| field | JSON type | what it is |")
    L.append("| --- | --- | --- |")
    for k in keys:
        L.append(f"| `{k}` | {' / '.join(sorted(types[k]))} | {field_notes.get(k, '')} |")
    L.append("")
    L.append("First row, verbatim:\n")
    L.append("```json\n" + raw.decode("utf-8").splitlines()[0] + "\n```\n")
    L.append("`input`, `output`, `gts`, `score`, `step` are always written; every other column is one of "
             "`reward_extra_infos_dict`'s lists whose length equals the row count. Which extra columns appear "
             "depends on the reward function: a float-returning `compute_score` gives `reward` + `acc` (the "
             "naive reward manager's `acc = score`); a dict-returning one (math_dapo here) gives `reward` plus "
             "each key of the dict.\n")

    L.append("### Samples and scores\n")
    L.append(f"- {len(rec['val_problems'])} problems x {samples} samples = {n} rows. `_validate` repeats the "
             "batch with `DataProto.repeat(n, interleave=True)`, so the samples of one problem are adjacent: "
             f"rows {', '.join(f'{i * samples + 1}-{i * samples + samples}' for i in range(2))}, ... belong to "
             f"problems 1, 2, ...; in dataset order (`data.validation_shuffle=false`). Each pair has the same "
             f"`input` and `gts`: {'yes' if grouped else 'NO'}. Nothing in a row names the problem or the "
             "sample: no id, no uid, no index (the v1 trainer's dump, below, adds `uid`).")
    L.append(f"- `score` values: {score_values} (math_dapo: +1.0 correct, -1.0 otherwise); "
             f"score == 1 in {n_pos} of {n} rows ({n_pos / n:.1%}); `reward == score` in every row: "
             f"{same_reward}; `acc == (score == 1)` in every row: {acc_matches}.")
    L.append(f"- response lengths {min(resp_lens)}-{max(resp_lens)} tokens (limit {calls[0]['max_tokens']}); "
             f"finish: {', '.join(finishes)}.\n")

    L.append("## How verl's code was run\n")
    L.append("verl's trainer cannot run here (no GPU: Ray worker groups, FSDP, vLLM), so make_fixture.py runs "
             "the part of it that writes the dump, in one process:\n")
    L.append("1. The config is composed from verl's packaged `verl/trainer/config/ppo_trainer.yaml` with Hydra "
             "(as `python -m verl.trainer.main_ppo` does), with these overrides, then checked with verl's "
             "`validate_config` and resolved:\n")
    L.append("```\n" + "\n".join(rec["overrides"]) + "\n```\n")
    L.append("   (paths are those of the recorded run; `trainer.use_v1=false` selects `RayPPOTrainer`, "
             "`verl/trainer/main_ppo_v0.py`.)")
    L.append("2. Data: the first 20 problems of `synth_test.jsonl` (val) and the 10 of `synth_train.jsonl` "
             "(train; `RayPPOTrainer.__init__` needs a train set) written as parquet in verl's RL schema "
             "(`data_source=\"math\"`, `prompt=[{role: user, content: problem + INSTRUCTION}]`, `ability`, "
             "`reward_model={style: rule, ground_truth: answer}`, `extra_info={split, index, id, level}`) with "
             "INSTRUCTION = ` Let's think step by step and output the final answer within \\boxed{}.` "
             "(verl's math preprocessing instruction); loaded by verl's `create_rl_dataset` (`RLHFDataset`).")
    L.append("3. `RayPPOTrainer(config, tokenizer, role_worker_mapping={Role.ActorRollout: ...}, "
             "resource_pool_manager=None, train_dataset, val_dataset, collate_fn, train_sampler)`: the real "
             "`__init__` (dataloaders, dump executor). `init_workers()` is not called; instead the attribute it "
             "would set for validation, `trainer.async_rollout_manager`, is verl's `AgentLoopManager` (subclassed "
             "only so its `AgentLoopWorker` runs in-process, not as a Ray actor) with verl's "
             "`RewardLoopWorker` (naive reward manager, `default_compute_score`) as its reward handle.")
    L.append("4. As `fit()` does with `val_before_train`: `trainer.global_steps = 0`, `SkipManager.init(config)`, "
             "`trainer._validate()` (which calls `self._dump_generations(inputs=..., outputs=..., gts=..., "
             "scores=..., reward_extra_infos_dict=..., dump_path=config.trainer.validation_data_dir)`), then "
             "`trainer._shutdown_dump_executor()` to drain the background write.")
    L.append("5. The single stand-in: the LLM server. verl's `SingleTurnAgentLoop` renders the prompt ids with "
             "verl's Continuous Token builder (`apply_chat_template(messages, add_generation_prompt=True)`; "
             f"default builder, model_type `{cfg.get('model_type')}`) and calls `server_manager.generate("
             "request_id, prompt_ids=..., sampling_params=...)`. That call is answered by "
             "`HFTransformersLLMClient` (make_fixture.py): plain `transformers` `model.generate` on the CPU, "
             "float32, `do_sample=True, temperature=1.0, top_p=1.0, top_k=0` (vLLM's `top_k=-1`), "
             "`max_new_tokens` by vLLM's rule (here 200), seeded per request with `torch.manual_seed(seed + "
             "priority)` (seed 0, priority = row position), ids kept up to and including the first EOS as vLLM "
             "returns them. No log-probs (`rollout.calculate_log_probs=false`).\n")
    L.append("Everything after generation (padding, masks, `rm_scores` at the last response token, reward extra "
             "infos, decoding, the columns, the JSON) is verl's code. The installed functions that wrote the "
             f"file (`{trainer_py.relative_to(Path(verl.__file__).parent.parent)}`, sha256 "
             f"`{sha256(trainer_py)}`):\n")
    L.append("```python\n" + dump_src.rstrip() + "\n\n" + write_src.rstrip() + "\n```\n")

    L.append("## Versions\n")
    L.append(f"verl **{v['verl']}** (newest on PyPI when made), installed with `pip install --no-deps "
             "verl==" + v["verl"] + "` into `bench/.envs/verl` after `bench/peers/verl/requirements.lock` "
             "(pip freeze of the working venv). verl's declared deps that are not installed (not needed for this "
             "path): wandb, tensorboard, pylatexenc, pybind11. The machine-wide pip constraint (torch<=2.14.1) "
             "did not conflict; no `PIP_CONSTRAINT` override.\n")
    L.append("| package | version |")
    L.append("| --- | --- |")
    for k, val in v.items():
        L.append(f"| {k} | {val} |")
    L.append("")

    L.append("## Model\n")
    L.append(f"`{model}`: the project's embedded tiny Llama ({cfg.get('num_hidden_layers')} layers, hidden "
             f"{cfg.get('hidden_size')}, vocab {cfg.get('vocab_size')}, max_position_embeddings "
             f"{cfg.get('max_position_embeddings')}), seed {prl_model.get('seed')}, warm-started by SFT on the "
             "synthetic arithmetic task:\n")
    L.append("```\nprl model build-tiny --out D/tiny\nprl model sft --model D/tiny --out D/warm --steps 300 "
             "--threads 1\n```\n")
    if manifest:
        L.append(f"- SFT manifest: created {manifest.get('created_at')}, argv `{' '.join(manifest.get('argv', []))}`, "
                 f"prl git {manifest.get('git', {}).get('commit')} (dirty: {manifest.get('git', {}).get('dirty')})")
    if sft:
        L.append(f"- SFT report: {sft.get('steps')} steps, final loss {sft.get('final_loss'):.4f}, held-out "
                 f"accuracy greedy {sft.get('accuracy_after_greedy')}, sampled {sft.get('accuracy_after_sampled')} "
                 "(trained on the project's own prompt: a system turn plus the user turn; the verl rows use a "
                 "user turn only, as verl's math data does)")
    L.append(f"- `model.safetensors` sha256 `{sha256(model / 'model.safetensors')}`")
    L.append(f"- `tokenizer.json` sha256 `{sha256(model / 'tokenizer.json')}`; chat template "
             f"(`chat_template.jinja`) sha256 `{sha256(model / 'chat_template.jinja')}`\n")
    L.append("## Data\n")
    L.append(f"`prl data synth --out DIR --train 10`, `synth_test.jsonl` sha256 `{sha256(test)}`; the 20 problems: "
             f"{', '.join(rec['val_problems'])}.\n")

    L.append("## verl versions and trainers: what else an importer may meet\n")
    L.append("- verl 0.9.x's default trainer is the v1 one (`trainer.use_v1=true`, "
             "`verl/trainer/ppo/v1/trainer_base.py`, TransferQueue). Its `_write_generations` writes the same "
             "base columns but adds a `uid` column (`{uid}_{session}_{index}` keys), sorts rows by it (samples "
             "of a prompt stay together, prompts are no longer in dataset order) and serialises numpy scalars "
             "through its own `default=` hook. This fixture is the v0 `RayPPOTrainer` file (no `uid`).")
    L.append("- Checked in the released wheels' `RayPPOTrainer._dump_generations`: 0.4.1 and 0.5.0 write "
             "`input, output, score, step` + extras (no `gts`; signature `(inputs, outputs, scores, "
             "reward_extra_infos_dict, dump_path)`); 0.6.1 and 0.7.1 add `gts` after `output`; 0.8.0 and later "
             "write from a background thread with `json.dumps(..., default=str)`. All: `{global_steps}.jsonl`, "
             "one object per line, `ensure_ascii=False`, a final newline. (0.3.0.post1 has no such dump.)")
    L.append("- Extra columns vary with the reward function (see above); `score` may be 0/1 (math, gsm8k), "
             "+1/-1 (math_dapo) or continuous.")
    Path(a.out).write_text("\n".join(L) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
