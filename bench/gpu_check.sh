#!/usr/bin/env bash
# GPU readiness check (issues 15, 26), run on the lent GPU machine from the repo root (bench/GPU.md):
#
#   bash bench/gpu_check.sh                        # after bench/gpu_prepare.sh, with .gpu/ carried
#   PATH=$PWD/.venv/bin:$PATH PRL_GPU_CHECK_CPU_REHEARSAL=1 bash bench/gpu_check.sh   # CPU dry rehearsal here
#
# Phases, each under its own `timeout` and all under one deadline (PRL_GPU_CHECK_DEADLINE_S, default 270 s, so
# that the device call fits timeout_s=300 with the summary):
#   install   .gpu/wheels/*.whl into /tmp/site (what the image lacks: deepspeed, math-verify, duckdb, ...)
#   env       python / torch / CUDA / GPU / package versions; the imports the trainer needs; CUDA present
#   nccl      the trainer's process group on this GPU (prl.training.distributed.init_distributed: NCCL, device_id
#             bound, the config's timeout), one all-reduce; device memory before and after: the plan's NCCL term
#   build     a randomly initialised SmolLM2-135M (config and tokenizer from .gpu/smollm2-config; seeded)
#             saved with its tokenizer as a plain HF directory /tmp/smollm2-random
#   rollouts  HF engine on CUDA (prl.generation.engines.make_engine("hf", ..., dtype="bfloat16")): the paper's
#             prompts for 32 math500 problems x n=8, 256 tokens each, ignore_eos -> generated tokens/s
#   plan      `prl train --dry-run --json` of the train phase's config on this GPU: the memory of the rank
#             term by term and per phase (prl.training.memory), the prediction the train phase is held to
#   train     2 PRL steps through the real trainer (python -m prl.training.train, engine hf, one rank, DeepSpeed
#             ZeRO-3, bf16, gradient checkpointing, log-probs 1,024 tokens at a time, the engine asleep during
#             the update (level 2), 16 prompts x 5 samples, 256 tokens); per-step times and each phase's peak
#             CUDA memory from the DuckDB store, set against the plan term by term
# and writes $OUT/gpu_check.json (bench/results/gpu_check.json without $OUT; rehearsal: its work folder).
#
# The rehearsal (PRL_GPU_CHECK_CPU_REHEARSAL=1) runs the same Python on CPU, shrunk: 4 problems, 16 tokens,
# a 2-layer model, 1 step, float32, ZeRO stage 3; it checks the wheels install for CPython 3.12 into a
# throwaway folder instead of using them (the project's .venv already has those packages).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TQDM_DISABLE=1  # no progress bars in the log
PY=${PRL_GPU_PYTHON:-python3}
REHEARSAL=${PRL_GPU_CHECK_CPU_REHEARSAL:-0}
DEADLINE=${PRL_GPU_CHECK_DEADLINE_S:-270}
RESERVE=20                                   # seconds kept for the summary after the last phase
GPU_DIR=$ROOT/.gpu
WORK=${PRL_GPU_CHECK_WORK:-/tmp/prl_gpu_check}
SITE=${PRL_GPU_SITE:-/tmp/site}
MODEL=${PRL_GPU_MODEL_DIR:-/tmp/smollm2-random}
if [ "$REHEARSAL" = 1 ]; then
  MODEL=$WORK/smollm2-random
  RESULT=${OUT:+$OUT/gpu_check.json}
  RESULT=${RESULT:-$WORK/gpu_check.json}    # a rehearsal never writes into bench/results
else
  RESULT=${OUT:+$OUT/gpu_check.json}
  RESULT=${RESULT:-$ROOT/bench/results/gpu_check.json}
fi

# Sizes: the GPU check's, or the rehearsal's.
if [ "$REHEARSAL" = 1 ]; then
  export GC_PROBLEMS=4 GC_N=8 GC_GEN_TOKENS=16 GC_LAYERS=2 GC_DTYPE=float32
  export GC_STEPS=1 GC_PROMPTS_PER_STEP=2 GC_N_SAMPLES=2 GC_TRAIN_TOKENS=16 GC_MINI=4 GC_MICRO=2 GC_ZERO=3
  export GC_VERIFIERS=1
else
  export GC_PROBLEMS=32 GC_N=8 GC_GEN_TOKENS=256 GC_LAYERS=0 GC_DTYPE=bfloat16
  export GC_STEPS=2 GC_PROMPTS_PER_STEP=16 GC_N_SAMPLES=5 GC_TRAIN_TOKENS=256 GC_MINI=80 GC_MICRO=16 GC_ZERO=3
  export GC_VERIFIERS=4
fi
export GC_REHEARSAL=$REHEARSAL GC_WORK=$WORK GC_MODEL=$MODEL GC_CONF=$GPU_DIR/smollm2-config GC_ROOT=$ROOT
export GC_RESULT=$RESULT GC_GPU_DIR=$GPU_DIR

say() { printf '%s\n' "$*"; }
die() { say "error: $*" >&2; exit 1; }

rm -rf "$WORK"
mkdir -p "$WORK" "$(dirname "$RESULT")"

# phase NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, within what is left of the deadline, and
# records {status, rc, seconds} in $WORK/status_NAME.json. Returns the command's status (124: timed out).
phase() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS - RESERVE)) t0=$SECONDS rc=0 status
  if [ "$left" -lt 15 ]; then
    say "!! [$name] skipped: only ${left}s left before the ${DEADLINE}s deadline"
    printf '{"status": "skipped", "rc": null, "seconds": 0}\n' >"$WORK/status_$name.json"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  say ""
  say "== [$name] $(date -u +%H:%M:%S) (limit ${limit}s, ${SECONDS}s into the check)"
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  printf '{"status": "%s", "rc": %d, "seconds": %d, "limit_s": %d}\n' "$status" "$rc" $((SECONDS - t0)) "$limit" \
    >"$WORK/status_$name.json"
  [ "$rc" = 0 ] && say "== [$name] ok in $((SECONDS - t0))s" || say "!! [$name] $status (rc $rc) after $((SECONDS - t0))s"
  return "$rc"
}

# The summary: merges what the phases wrote into $RESULT and prints it. Runs on every exit.
summary() {
  local rc=$?
  trap - EXIT
  [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2>/dev/null || true
  say ""
  say "== [summary] $(date -u +%H:%M:%S) (${SECONDS}s into the check)"
  local src=0
  timeout 30 "$PY" - "$rc" <<'PY' || src=$?
import json, os, sys, time
from pathlib import Path

work, result = Path(os.environ["GC_WORK"]), Path(os.environ["GC_RESULT"])
def load(name):
    p = work / name
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None

phases = {n: load(f"status_{n}.json") or {"status": "not run"}
          for n in ("install", "env", "nccl", "build", "rollouts", "plan", "train")}
try:
    prepared = json.loads((Path(os.environ["GC_GPU_DIR"]) / "prepared.json").read_text())
except (OSError, ValueError):
    prepared = None
env, build, ro, tr = load("env.json"), load("build.json"), load("rollouts.json"), load("train.json")
plan = load("plan.json")


def memory_check(plan, tr):
    """Each phase's measured peak against the plan, and the terms that measurements isolate (GiB).

    GPU: measured = the allocator's peak of allocated bytes in the phase; the plan's phase minus its overhead
    term (the CUDA context and fragmentation are outside allocated bytes; the overhead is checked on its own
    against the device memory the allocator did not reserve)."""
    if not plan or not tr or not tr.get("steps"):
        return None
    mp = plan["memory_plan"]
    terms = {t["name"]: t for t in mp["terms"]}
    def term(name, phase):
        t = terms[name]
        return (t["phases"] or {}).get(phase, t["gib"])
    later = tr["steps"][1:] or tr["steps"]
    def measured(key):
        vals = [s[key] for s in later if key in s]
        return max(vals) if vals else None
    cuda = (plan.get("device") or "cpu") != "cpu"
    rows = []
    for phase in ("rollout", "logprobs", "update"):
        predicted = mp["phases_gib"][phase] - (term("overhead", phase) if cuda else 0.0)
        rows.append({"what": f"{phase} phase peak", "predicted_gib": predicted, "measured_gib": measured(f"memory/{phase}_peak_gib")})
    rec = tr.get("memory_record") or {}
    if rec:
        engine = rec["engine_built_gib"] - rec["before_models_gib"]
        rows.append({"what": "engine weights (built)", "predicted_gib": plan["model_weights_gib"], "measured_gib": engine})
        held = measured("memory/held_gib")
        if held is not None:
            rows.append({"what": "model states + reference + engine weights (held between steps)",
                         "predicted_gib": term("model states", "update") + term("reference", "update") + plan["model_weights_gib"]
                                          + (0.0 if cuda else term("overhead", "rollout")),
                         "measured_gib": held})
            upd = measured("memory/update_peak_gib")
            rows.append({"what": "activations + log-prob chunk (update peak above what is held, engine asleep)",
                         "predicted_gib": term("activations", "update") + term("log-prob chunk", "update"),
                         "measured_gib": (upd - (held - plan["model_weights_gib"])) if upd is not None else None})
    if cuda:
        rows.append({"what": "overhead outside the allocator (CUDA context)", "predicted_gib": term("overhead", "rollout"),
                     "measured_gib": measured("memory/outside_allocator_gib")})
    for r in rows:
        p_, m_ = r["predicted_gib"], r["measured_gib"]
        r["ratio"] = round(p_ / m_, 3) if p_ and m_ else None
        r["within_20pct"] = None if r["ratio"] is None else bool(0.8 <= r["ratio"] <= 1.2)
    return {"device": plan.get("device"), "plan_fits": mp["fits"], "plan_peak_gib": mp["peak_gib"],
            "plan_peak_phase": mp["peak_phase"], "rows": rows}
out = {
    "kind": "gpu_check",
    "rehearsal": os.environ["GC_REHEARSAL"] == "1",
    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "exit_status": int(sys.argv[1]),
    "ok": all(p.get("status") == "ok" for p in phases.values()),
    "prepared": prepared,
    "machine": (env or {}).get("machine"),
    "versions": (env or {}).get("versions"),
    "phases": phases,
    "model": build,
    "nccl": load("nccl.json"),
    "cannot_check": ("vLLM on CUDA: the lent machine has no package registry and vLLM's CUDA wheel (~400 MB) does "
                     "not fit the 64 MiB carried, so the HF engine stands in: vLLM's sleep mode, CUDA graphs, "
                     "weight transfer and Model Runner V2 run on a GPU first on the first real run; NCCL across "
                     "ranks (one GPU: one rank)"),
    "rollouts": ro,
    "train": tr,
    "plan": {k: plan[k] for k in ("device", "memory_plan", "model_weights_gib")} if plan else None,
    "memory": memory_check(plan, tr),
}
result.write_text(json.dumps(out, indent=2) + "\n")

m, v = out["machine"] or {}, out["versions"] or {}
print(f"machine:  {m.get('gpu') or m.get('device') or '?'}; python {v.get('python')}, torch {v.get('torch')} "
      f"(CUDA {v.get('torch_cuda')}), transformers {v.get('transformers')}, deepspeed {v.get('deepspeed')}")
for n, p in phases.items():
    print(f"phase {n:9s} {p.get('status'):8s} {p.get('seconds', '')}{'s' if 'seconds' in p else ''}")
if ro:
    print(f"rollouts: {ro['prompts']} prompts x {ro['n']} x {ro['max_tokens']} tokens = {ro['generated_tokens']} tokens "
          f"in {ro['seconds']:.2f} s -> {ro['tokens_per_s']:.0f} generated tokens/s "
          f"(hf engine on {ro['device']}, {ro['dtype']}, batch {ro['batch_size']}; load {ro['engine_load_s']:.1f} s, "
          f"peak {ro.get('peak_gpu_mem_gib')} GiB)")
if tr and tr.get("steps"):
    print(f"train:    {len(tr['steps'])} PRL steps, ZeRO-{tr['config']['zero_stage']} {tr['config']['dtype']}, "
          f"{tr['config']['prompts_per_step']} prompts x {tr['config']['n_samples']} x {tr['config']['max_tokens']} tokens "
          f"(process {tr.get('process_s')} s)")
    cols = ["step", "generate", "verify", "logprobs", "update", "sync"]
    print("  step " + " ".join(f"{c:>9s}" for c in cols) + "   len  rollout tok/s")
    for s in tr["steps"]:
        print(f"  {s['step']:4d} " + " ".join(f"{s.get('time/' + c, float('nan')):9.2f}" for c in cols)
              + f" {s.get('response/length', float('nan')):5.0f}  {s.get('rollout_tokens_per_s', float('nan')):9.0f}")
    if tr.get("mean_after_first"):
        a = tr["mean_after_first"]
        print("  mean " + " ".join(f"{a.get('time/' + c, float('nan')):9.2f}" for c in cols) + "   (steps after the first)")
mc = out["memory"]
if mc:
    print(f"memory:   the plan says {'fits' if mc['plan_fits'] else 'DOES NOT FIT'} (peak {mc['plan_peak_gib']:.2f} GiB, "
          f"{mc['plan_peak_phase']}); predicted vs measured:")
    for r in mc["rows"]:
        m_ = r["measured_gib"]
        print(f"  {r['what']:<75s} {r['predicted_gib']:7.2f} {m_ if m_ is None else round(m_, 2)!s:>7s}  "
              f"ratio {r['ratio']}  {'ok' if r['within_20pct'] else 'OFF' if r['within_20pct'] is False else '-'}")
nc = out["nccl"]
if nc:
    print(f"nccl:     {nc['backend']} group of {nc['world']}, timeout {nc['timeout_s']:.0f} s, all-reduce "
          f"{'ok' if nc['allreduce_ok'] else 'WRONG'}, {nc['seconds']} s"
          + (f"; {nc['device_gib_taken']} GiB of device memory (the plan assumes {nc['plan_nccl_gib']} GiB with "
             "several ranks)" if "device_gib_taken" in nc else ""))
print("cannot check here: " + out["cannot_check"])
print(f"written:  {result}")
print("GPU CHECK OK" if out["ok"] else "GPU CHECK INCOMPLETE: a phase did not finish (see above)")
sys.exit(0 if out["ok"] else 3)
PY
  case $src in 0) ;; 3) [ "$rc" != 0 ] || rc=3 ;; *) say "!! the summary failed; the phase files are in $WORK"; [ "$rc" != 0 ] || rc=$src ;; esac
  exit "$rc"
}
trap summary EXIT

say "GPU check: $( [ "$REHEARSAL" = 1 ] && echo 'CPU REHEARSAL (shrunk sizes)' || echo 'GPU') in $ROOT," \
    "deadline ${DEADLINE}s, work folder $WORK, result $RESULT"
command -v "$PY" >/dev/null || die "$PY not found"
[ -d "$GPU_DIR/wheels" ] || die "$GPU_DIR/wheels missing: run bash bench/gpu_prepare.sh on a machine with network and carry .gpu"
[ -f "$GPU_DIR/smollm2-config/config.json" ] || die "$GPU_DIR/smollm2-config missing: run bash bench/gpu_prepare.sh"
ls "$GPU_DIR"/wheels/*.whl >/dev/null 2>&1 || die "no wheels in $GPU_DIR/wheels: run bash bench/gpu_prepare.sh"

# ── install ─────────────────────────────────────────────────────────────────────────────────
if [ "$REHEARSAL" = 1 ]; then
  # The wheels are CPython 3.12's; pip can still install them for 3.12 into a folder nobody imports from.
  # (pip checks wheel files named on the command line against this interpreter; names found through
  # --find-links are matched against --python-version/--platform instead.)
  names=$(for w in "$GPU_DIR"/wheels/*.whl; do w=${w##*/}; printf '%s==%s ' "${w%%-*}" "$(cut -d- -f2 <<<"$w")"; done)
  # shellcheck disable=SC2086  # $names: one requirement per word
  phase install 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --find-links "$GPU_DIR/wheels" --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --target "$WORK/site-py312" $names || true
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
else
  rm -rf "$SITE"
  phase install 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$GPU_DIR"/wheels/*.whl || die "the wheels did not install (see above)"
  export PYTHONPATH=$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
say "PYTHONPATH=$PYTHONPATH"

# ── env ─────────────────────────────────────────────────────────────────────────────────────
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$WORK/nvidia-smi.csv" 2>&1 || true
  say "nvidia-smi: $(cat "$WORK/nvidia-smi.csv")"
else
  say "nvidia-smi: not found"
fi
phase env 120 "$PY" - <<'PY' || die "the environment is not ready (see above); nothing else can run"
import importlib, json, os, platform, sys
from importlib import metadata
from pathlib import Path

rehearsal = os.environ["GC_REHEARSAL"] == "1"
work = Path(os.environ["GC_WORK"])
import torch

def ver(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None

versions = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None}
for dist in ("transformers", "tokenizers", "safetensors", "huggingface-hub", "accelerate", "deepspeed", "pydantic",
             "pydantic-core", "hjson", "typing-extensions", "math-verify", "latex2sympy2_extended",
             "antlr4-python3-runtime", "sympy", "duckdb", "numpy", "pandas", "pyarrow", "pyyaml", "tqdm", "einops",
             "msgpack", "ninja", "psutil", "py-cpuinfo", "triton"):
    versions[dist] = ver(dist)
smi = (work / "nvidia-smi.csv").read_text().strip() if (work / "nvidia-smi.csv").is_file() else None
machine = {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(), "nvidia_smi": smi,
           "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    machine.update(gpu=torch.cuda.get_device_name(0), gpu_mem_gib=round(p.total_memory / 2**30, 1),
                   sms=p.multi_processor_count, capability=f"{p.major}.{p.minor}", device="cuda")
else:
    machine["device"] = "cpu"
print(json.dumps({"machine": machine, "versions": versions}, indent=1))
problems = []
for mod in ("deepspeed", "duckdb", "math_verify", "latex2sympy2_extended", "pydantic", "hjson", "transformers",
            "prl.training.train", "prl.generation.engines.hf_engine", "prl.grading.verifier", "prl.store.db"):
    try:
        importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - reported, then the check stops
        problems.append(f"import {mod}: {type(e).__name__}: {e}")
if not torch.cuda.is_available() and not rehearsal:
    problems.append("torch sees no CUDA device (torch.cuda.is_available() is False)")
(work / "env.json").write_text(json.dumps({"machine": machine, "versions": versions, "problems": problems}, indent=1))
for p in problems:
    print("error:", p)
sys.exit(1 if problems else 0)
PY

# ── build: a random SmolLM2-135M ─────────────────────────────────────────────────────────────
phase build 150 "$PY" - <<'PY' || die "the random model could not be built; the engine and trainer need it"
import json, os, shutil, time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

conf, model_dir, work = Path(os.environ["GC_CONF"]), Path(os.environ["GC_MODEL"]), Path(os.environ["GC_WORK"])
layers, dtype = int(os.environ["GC_LAYERS"]), os.environ["GC_DTYPE"]
t0 = time.perf_counter()
cfg = AutoConfig.from_pretrained(conf)
if layers:
    cfg.num_hidden_layers = layers
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg)
model.to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
shutil.rmtree(model_dir, ignore_errors=True)
model.save_pretrained(model_dir, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
    shutil.copy(conf / f, model_dir / f)
tok = AutoTokenizer.from_pretrained(model_dir)
assert tok.chat_template, "the tokenizer lost its chat template"
n = sum(p.numel() for p in model.parameters())
info = {"dir": str(model_dir), "architecture": type(model).__name__, "n_parameters": n, "layers": cfg.num_hidden_layers,
        "vocab_size": cfg.vocab_size, "saved_dtype": dtype, "init": "random (AutoModelForCausalLM.from_config, seed 0)",
        "config_from": "SmolLM2-135M-Instruct (.gpu/smollm2-config)", "seconds": round(time.perf_counter() - t0, 1),
        "files": sorted(p.name for p in model_dir.iterdir())}
(work / "build.json").write_text(json.dumps(info, indent=1))
print(json.dumps(info, indent=1))
PY

# ── rollouts: the HF engine ─────────────────────────────────────────────────────────────────
phase nccl 45 env DS_ACCELERATOR="$( [ "$REHEARSAL" = 1 ] && echo cpu || echo cuda )" "$PY" - <<'PY' || true
# The trainer's own process group on this machine's one GPU: NCCL with the rank's device_id bound, so the
# communicator is created at start; what it takes on the device is the plan's NCCL term for one rank (more
# ranks add channels and peers). In the rehearsal: gloo on the CPU, no memory figure.
import json, os, time
from pathlib import Path

import torch

from prl.training import distributed as d
from prl.training import memory as mem

work = Path(os.environ["GC_WORK"])
cuda = torch.cuda.is_available()
if cuda:
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
t0 = time.perf_counter()
rank, world = d.init_distributed(60)
x = torch.ones(1 << 20, device=d.device())
torch.distributed.all_reduce(x)
if cuda:
    torch.cuda.synchronize()
out = {"backend": torch.distributed.get_backend(), "rank": rank, "world": world,
       "timeout_s": d.group_timeout().total_seconds(), "seconds": round(time.perf_counter() - t0, 2),
       "allreduce_ok": bool((x == world).all()), "plan_nccl_gib": mem.NCCL_GIB}
if cuda:
    free1, _ = torch.cuda.mem_get_info()
    out["device_gib_taken"] = round((free0 - free1) / 2**30, 3)  # the group + 4 MiB of test tensor
torch.distributed.destroy_process_group()
(work / "nccl.json").write_text(json.dumps(out, indent=1))
print(json.dumps(out))
PY

phase rollouts 60 "$PY" - <<'PY' || true
import json, os, time
from pathlib import Path

import torch
from prl.data.datasets import load_dataset
from prl.generation.engines import SamplingConfig, make_engine

work, model_dir = Path(os.environ["GC_WORK"]), os.environ["GC_MODEL"]
rehearsal = os.environ["GC_REHEARSAL"] == "1"
n_problems, n, max_tokens, dtype = (int(os.environ["GC_PROBLEMS"]), int(os.environ["GC_N"]),
                                    int(os.environ["GC_GEN_TOKENS"]), os.environ["GC_DTYPE"])
cuda = torch.cuda.is_available()
sync = torch.cuda.synchronize if cuda else (lambda: None)
problems, _ = load_dataset("math500", flag_raw_only=False)
problems = problems[:n_problems]
t0 = time.perf_counter()
engine = make_engine("hf", model_dir, dtype=dtype)
load_s = time.perf_counter() - t0
print(f"engine: {engine.name} on {engine.device}, {dtype}, batch_size {engine.batch_size}, "
      f"attention {getattr(engine.model.config, '_attn_implementation', None)}, load {load_s:.1f} s")
if not rehearsal and engine.device.type != "cuda":
    raise SystemExit(f"error: HFEngine picked {engine.device}, not cuda")
prompts = engine.build_prompts([p.problem for p in problems])
prompt_tokens = [len(x) for x in engine.encode(prompts)]
sampling = SamplingConfig(n=n, temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=0, logprobs=True,
                          ignore_eos=True)
t0 = time.perf_counter()
engine.generate(prompts[:2], SamplingConfig(n=2, max_tokens=8, seed=1, ignore_eos=True))  # warm-up
sync()
warm_s = time.perf_counter() - t0
if cuda:
    torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
samples = engine.generate(prompts, sampling)
sync()
seconds = time.perf_counter() - t0
lengths = sorted({s.n_tokens for s in samples})
assert len(samples) == len(prompts) * n, len(samples)
assert lengths == [max_tokens], f"samples not all {max_tokens} tokens: {lengths[:5]}"
assert all(s.logprobs is not None and len(s.logprobs) == s.n_tokens for s in samples)
tokens = sum(s.n_tokens for s in samples)
info = {"engine": "hf", "device": str(engine.device), "dtype": dtype, "batch_size": engine.batch_size,
        "attn_implementation": getattr(engine.model.config, "_attn_implementation", None),
        "dataset": "math500", "prompts": len(prompts), "n": n, "max_tokens": max_tokens, "ignore_eos": True,
        "logprobs": True, "temperature": 1.0, "prompt_format": engine.prompt_format,
        "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens), 1), "prompt_tokens_max": max(prompt_tokens),
        "generate_calls": -(-len(prompts) // max(1, engine.batch_size // n)),
        "generated_tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
        "engine_load_s": round(load_s, 2), "warmup_s": round(warm_s, 2),
        "peak_gpu_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None}
(work / "rollouts.json").write_text(json.dumps(info, indent=1))
print(json.dumps(info, indent=1))
engine.close()
PY

# ── train: 3 PRL steps through the real trainer ──────────────────────────────────────────────
CFG=$WORK/train.yaml
"$PY" - <<'PY'
import os, json
from pathlib import Path

e = os.environ
work = Path(e["GC_WORK"])
rehearsal = e["GC_REHEARSAL"] == "1"
cfg = {
    "algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n", "order": "advantage_first",
                  "n_samples": int(e["GC_N_SAMPLES"]), "clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0,
                  "loss_agg": "token-mean", "kl_loss_coef": 0.0},
    "train": {"model": e["GC_MODEL"], "out_dir": str(work / "train_out"), "db": str(work / "store.duckdb"),
              "run_id": "gpu_check_rehearsal" if rehearsal else "gpu_check", "seed": 0,
              "steps": int(e["GC_STEPS"]), "prompts_per_step": int(e["GC_PROMPTS_PER_STEP"]),
              "train_data": "synth_train", "train_size": 1000, "max_tokens": int(e["GC_TRAIN_TOKENS"]),
              "temperature": 1.0, "engine": "hf", "weight_sync": "memory", "lr": 1.0e-6, "ppo_epochs": 1,
              "mini_batch_size": int(e["GC_MINI"]), "micro_batch_size": int(e["GC_MICRO"]), "grad_clip": 1.0,
              "zero_stage": int(e["GC_ZERO"]), "dtype": e["GC_DTYPE"], "checkpoint_every": int(e["GC_STEPS"]),
              "gradient_checkpointing": True, "logprob_chunk_tokens": 1024, "rollout_sleep_level": 2,
              "keep_checkpoints": 1, "eval_every": 0, "eval_datasets": [], "segments_per_step": 4,
              "verifier_workers": int(e["GC_VERIFIERS"])},
}
import yaml
(work / "train.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
from prl.training.config import RunConfig
rc = RunConfig.from_yaml(work / "train.yaml")
rc.train.validate(rc.algorithm, 1)
print(f"config {work / 'train.yaml'} parses and validates:")
print(yaml.safe_dump(cfg, sort_keys=False), end="")
PY
# ── plan: the dry run's memory of this rank, on this device ──────────────────────────────────
phase plan 120 "$PY" - <<'PY' || true
import json, os
from pathlib import Path

import torch
from prl.training import dry_run
from prl.training.config import RunConfig
from prl.training.memory import GPUS

work = Path(os.environ["GC_WORK"])
cfg = RunConfig.from_yaml(work / "train.yaml")
if torch.cuda.is_available():
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    device = min(GPUS, key=lambda g: abs(GPUS[g] - total))  # the named device of this size (an H200 here)
else:
    device = "cpu"
plan = dry_run.plan(cfg, gpus_per_node=1, device=device)
e = 2 if cfg.train.dtype == "bfloat16" else 4
out = {"device": device, "memory_plan": plan["memory_plan"], "model_weights_gib": e * plan["model"]["total"] / 2**30}
(work / "plan.json").write_text(json.dumps(out, indent=1, default=str))
print("\n".join(dry_run.render_memory(plan["memory_plan"])))
PY
if command -v nvidia-smi >/dev/null && [ "$REHEARSAL" != 1 ]; then
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits -lms 500 >"$WORK/smi_train.csv" 2>/dev/null &
  SMI_PID=$!
fi
TRAIN_T0=$SECONDS
# stdout carries only the final JSON line; the step lines and library logs go to stderr, shown as they come.
phase train 150 env DS_ACCELERATOR="$( [ "$REHEARSAL" = 1 ] && echo cpu || echo cuda )" bash -c \
  '"$0" -m prl.training.train --config "$1" --no-progress >"$2" 2> >(tee "$3" >&2); rc=$?; wait $! 2>/dev/null; exit $rc' \
  "$PY" "$CFG" "$WORK/train.stdout" "$WORK/train.stderr" || true
TRAIN_S=$((SECONDS - TRAIN_T0))
if [ -n "${SMI_PID:-}" ]; then kill "$SMI_PID" 2>/dev/null || true; wait "$SMI_PID" 2>/dev/null || true; SMI_PID=; fi
export GC_TRAIN_S=$TRAIN_S
timeout 60 "$PY" - <<'PY' || say "!! could not read the training run's results"
import json, os
from pathlib import Path

import duckdb, yaml

work = Path(os.environ["GC_WORK"])
cfg = yaml.safe_load((work / "train.yaml").read_text())
t = cfg["train"]
final = None
lines = (work / "train.stdout").read_text().strip().splitlines() if (work / "train.stdout").is_file() else []
for line in reversed(lines):
    try:
        final = json.loads(line)
        break
    except ValueError:
        continue
err = (work / "train.stderr").read_text(errors="replace").splitlines() if (work / "train.stderr").is_file() else []
step_lines = [l for l in err if l.startswith("[train] step ")]
errors = [l for l in err if l.startswith("error:") or "Error" in l.split(":")[0]][-5:]
steps = []
memory_record = None
if Path(t["db"]).is_file():
    con = duckdb.connect(t["db"], read_only=True)
    rows = con.execute("SELECT step, name, value FROM train_metrics WHERE run_id = ? ORDER BY step, name",
                       [t["run_id"]]).fetchall()
    con.close()
    by = {}
    for step, name, value in rows:
        by.setdefault(step, {"step": step})[name] = value
    rollouts = t["prompts_per_step"] * cfg["algorithm"]["n_samples"]
    con = duckdb.connect(t["db"], read_only=True)
    row = con.execute("SELECT manifest FROM runs WHERE run_id = ?", [t["run_id"]]).fetchone()
    con.close()
    memory_record = json.loads(row[0]).get("memory") if row else None
    for s in sorted(by):
        d = by[s]
        if d.get("time/generate") and d.get("response/length") is not None:
            d["rollout_tokens_per_s"] = round(rollouts * d["response/length"] / d["time/generate"], 1)
        steps.append(d)
keys = ["time/step", "time/generate", "time/verify", "time/logprobs", "time/update", "time/sync",
        "rollout_tokens_per_s"]
later = steps[1:]
mean = {k: round(sum(s[k] for s in later) / len(later), 3) for k in keys if later and all(k in s for s in later)}
smi = work / "smi_train.csv"
gpu_mem = None
if smi.is_file():
    used = [int(l.split(",")[0]) for l in smi.read_text().splitlines() if l.split(",")[0].strip().isdigit()]
    gpu_mem = round(max(used) / 1024, 2) if used else None
info = {"config": {**t, **{k: cfg["algorithm"][k] for k in ("estimator", "n_samples", "eta", "step_split")}},
        "command": "python3 -m prl.training.train --config train.yaml --no-progress", "process_s": int(os.environ["GC_TRAIN_S"]),
        "final": final, "step_lines": step_lines, "steps": steps, "mean_after_first": mean or None,
        "peak_gpu_mem_used_gib_nvidia_smi": gpu_mem, "memory_record": memory_record, "stderr_errors": errors}
# the engine (vLLM, bf16 kernels) against the trainer: the behaviour-policy mismatch and the off-policy weights
# that correct it (docs/architecture.md §Off-policy correction), per step
OFFPOLICY = ("rollout/mismatch_kl", "rollout/is_weight_mean", "rollout/is_weight_max", "rollout/is_clipped_frac",
             "rollout/logprob_diff_max")
info["offpolicy"] = [{"step": s["step"], **{k: s.get(k) for k in OFFPOLICY}} for s in steps]
(work / "train.json").write_text(json.dumps(info, indent=1, default=str))
print(f"{len(step_lines)} step line(s), {len(steps)} step(s) in train_metrics; final: {final}")
for o in info["offpolicy"]:
    print(f"  step {o['step']}: " + ", ".join(f"{k.split('/')[1]} {o[k]:.4g}" if isinstance(o[k], (int, float))
                                             else f"{k.split('/')[1]} –" for k in OFFPOLICY))
if not steps:
    raise SystemExit("error: no train_metrics rows for the run")
PY
