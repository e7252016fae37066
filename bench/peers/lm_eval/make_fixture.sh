#!/usr/bin/env bash
# Make tests/data/formats/lm_eval/: a REAL lm-evaluation-harness `--log_samples` output (samples_*.jsonl,
# results_*.json) written by lm-eval itself, plus PROVENANCE.md, as the fixture of `prl import --format lm-eval`.
#
#   bench/peers/lm_eval/make_fixture.sh [--model DIR] [--data FILE] [--work DIR] [--out DIR] [--n N]
#
#   --model DIR  a Hugging Face model directory to evaluate. Default: build one with the project's CLI
#                (prl model build-tiny, then prl model sft --steps 300 --threads 1: the embedded tiny model
#                warm-started on the synthetic arithmetic task; ~5-10 min on 1 CPU thread).
#   --model-how TEXT  with --model: how that model was made, for PROVENANCE.md.
#   --data FILE  the synthetic test split (synth_test.jsonl). Default: prl data synth --out WORK/synth --train 10.
#   --work DIR   scratch folder (default bench/out/lm_eval, gitignored); lm-eval runs from WORK/run.
#   --out DIR    where the fixture goes (default tests/data/formats/lm_eval); its samples_*.jsonl and
#                results_*.json are replaced.
#   --n N        problems evaluated: the first N of the test split (default 20).
#
# Steps: (a) venv at bench/.envs/lm_eval (gitignored) with python3 -m venv; (b) pip install the pinned lm-eval
# with the hf backend deps (the same torch/transformers/tokenizers/accelerate pins as pyproject.toml, since the
# tiny model's files are written by transformers 5.x: tokenizer_class TokenizersBackend); (c) lm-eval's hf backend
# on CPU, on the local model and a custom task over the local JSON-lines file (no hub: HF_*_OFFLINE=1);
# (d) copy lm-eval's output files (flattened: lm-eval nests them under OUTPUT_PATH/<sanitized model path>/)
# into --out and write PROVENANCE.md there.
#
# pip constraints: this machine's pip config sets a global constraint file (/etc/xdg/pip/constraints.txt:
# torch<=2.14.1, torchvision<=0.29.1). It does not conflict with these pins (torch==2.13.0), so it is left in
# force. Should it ever conflict, rerun with LM_EVAL_PIP_NO_CONSTRAINT=1, which runs pip with
# PIP_CONSTRAINT=/dev/null so that only the pins below apply. (Checked with this pip: the environment variable
# replaces the config file's constraint; an empty PIP_CONSTRAINT= does not, and `--constraint /dev/null` on the
# command line only adds to it.)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PRL="${PRL:-$REPO/.venv/bin/prl}"          # the project's CLI (its own venv; nothing is installed into it)
ENV_DIR="${LM_EVAL_ENV:-$REPO/bench/.envs/lm_eval}"   # LM_EVAL_ENV: another venv folder (for testing this script)

LM_EVAL_VERSION="0.4.13"                  # the newest lm-eval on PyPI when this was written (2026-12)
PINS=(
  "lm-eval[hf]==$LM_EVAL_VERSION"
  "torch==2.13.0"                         # CPU wheel, from the local indexes in /etc/pip.conf
  "transformers==5.19.0"
  "tokenizers==0.23.3"
  "accelerate==1.15.0"
)

MODEL=""; MODEL_HOW_GIVEN=""; DATA=""; WORK="$REPO/bench/out/lm_eval"; OUT="$REPO/tests/data/formats/lm_eval"; N=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --model-how) MODEL_HOW_GIVEN="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --n) N="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "make_fixture.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$WORK" "$OUT"
WORK="$(cd "$WORK" && pwd)"; OUT="$(cd "$OUT" && pwd)"

# Small and polite on a 2-core machine: one thread everywhere.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
# No hub here: everything is local.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export HF_HOME="$WORK/hf_home" HF_DATASETS_CACHE="$WORK/hf_home/datasets"
export HF_HUB_DISABLE_TELEMETRY=1

# (a) + (b) the venv and the pinned lm-eval.
if [[ ! -x "$ENV_DIR/bin/python" ]]; then
  echo "== creating $ENV_DIR"
  python3 -m venv "$ENV_DIR"
fi
if ! "$ENV_DIR/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('lm_eval') != '$LM_EVAL_VERSION')" 2>/dev/null; then
  echo "== pip install ${PINS[*]}"
  if [[ "${LM_EVAL_PIP_NO_CONSTRAINT:-0}" == 1 ]]; then
    PIP_CONSTRAINT=/dev/null "$ENV_DIR/bin/pip" install "${PINS[@]}"
  else
    "$ENV_DIR/bin/pip" install "${PINS[@]}"
  fi
fi
LM_EVAL="$ENV_DIR/bin/lm_eval"

# The model.
if [[ -z "$MODEL" ]]; then
  MODEL="$WORK/warm"
  if [[ ! -f "$MODEL/config.json" ]]; then
    echo "== building the model with $PRL (build-tiny, then sft --steps 300)"
    rm -rf "$WORK/tiny" "$MODEL"
    "$PRL" model build-tiny --out "$WORK/tiny"
    "$PRL" model sft --model "$WORK/tiny" --out "$MODEL" --steps 300 --threads 1
  fi
  MODEL_HOW="built by this script: $PRL model build-tiny --out D/tiny && $PRL model sft --model D/tiny --out D/warm --steps 300 --threads 1"
else
  MODEL="$(cd "$MODEL" && pwd)"
  MODEL_HOW="given with --model $MODEL${MODEL_HOW_GIVEN:+: $MODEL_HOW_GIVEN}"
fi
[[ -f "$MODEL/config.json" ]] || { echo "no config.json in $MODEL" >&2; exit 1; }

# The data: the first N problems of the synthetic test split.
if [[ -z "$DATA" ]]; then
  DATA="$WORK/synth/synth_test.jsonl"
  [[ -f "$DATA" ]] || "$PRL" data synth --out "$WORK/synth" --train 10
fi
RUN="$WORK/run"
rm -rf "$RUN"; mkdir -p "$RUN/tasks"
head -n "$N" "$DATA" > "$RUN/synth_test_20.jsonl"
[[ "$(wc -l < "$RUN/synth_test_20.jsonl")" -eq "$N" ]] || { echo "$DATA has fewer than $N problems" >&2; exit 1; }
cp "$HERE/task/prl_synth_arith.yaml" "$RUN/tasks/"

# (c) lm-eval. The prompt is the model's chat template with prl's system prompt (what `prl model sft` trained on;
# prl.generation.prompts.SYSTEM_PROMPT), the user turn being the task's doc_to_text.
SYSTEM_PROMPT='Please reason step by step, and put your final answer within \boxed{}.'
CMD=(
  "$LM_EVAL" run
  --model hf
  --model_args "pretrained=$MODEL,dtype=float32"
  --tasks prl_synth_arith
  --include_path tasks
  --device cpu
  --batch_size 4
  --apply_chat_template
  --system_instruction "$SYSTEM_PROMPT"
  --seed 0,1234,1234,1234
  --log_samples
  --output_path results
)
echo "== (cd $RUN && ${CMD[*]})"
START="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
( cd "$RUN" && "${CMD[@]}" ) 2>&1 | tee "$WORK/lm_eval.log"

# (d) flatten lm-eval's results/<sanitized model path>/{results,samples}_*.{json,jsonl} into OUT.
mapfile -t SAMPLES < <(find "$RUN/results" -name 'samples_*.jsonl' | sort)
mapfile -t RESULTS < <(find "$RUN/results" -name 'results_*.json' | sort)
[[ ${#SAMPLES[@]} -eq 1 && ${#RESULTS[@]} -eq 1 ]] || { echo "expected one samples and one results file under $RUN/results" >&2; find "$RUN/results" >&2; exit 1; }
rm -f "$OUT"/samples_*.jsonl "$OUT"/results_*.json
cp "${SAMPLES[0]}" "${RESULTS[0]}" "$OUT/"

"$ENV_DIR/bin/python" "$HERE/provenance.py" \
  --out "$OUT" --samples "$OUT/$(basename "${SAMPLES[0]}")" --results "$OUT/$(basename "${RESULTS[0]}")" \
  --nested "${SAMPLES[0]#"$RUN/"}" "${RESULTS[0]#"$RUN/"}" --task-yaml "$HERE/task/prl_synth_arith.yaml" \
  --model "$MODEL" --model-how "$MODEL_HOW" --data "$DATA" --n "$N" --started "$START" --env "$ENV_DIR" \
  --repo "$REPO" --work "$WORK" -- "${CMD[@]}"
echo "== wrote $OUT:"; ls -la "$OUT"
