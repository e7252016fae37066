#!/usr/bin/env bash
# Regenerate tests/data/formats/verl/: a real verl validation-generations dump (<global_steps>.jsonl),
# written by verl 0.9.1's own RayPPOTrainer._validate -> _dump_generations -> _write_generations
# (see make_fixture.py for exactly which verl code runs and the one stand-in: the inference server).
#
#   bench/peers/verl/make_fixture.sh [--model DIR] [--synth DIR] [--work DIR] [--out DIR]
#
#   --model DIR  an HF model directory: the project's tiny model warm-started on the synthetic task.
#                Without it the script builds one in WORK with the project's CLI:
#                  prl model build-tiny --out WORK/tiny
#                  prl model sft --model WORK/tiny --out WORK/warm --steps 300 --threads 1
#   --synth DIR  a directory with synth_test.jsonl and synth_train.jsonl; without it:
#                  prl data synth --out WORK/synth --train 10
#   --work DIR   scratch (default bench/.envs/verl-fixture-work, gitignored)
#   --out DIR    where the dump and PROVENANCE.md go (default tests/data/formats/verl)
#   --env-only   make (or check) verl's venv and stop: what bench/peers.py needs for its advantage comparison
#
# verl gets its own venv, bench/.envs/verl (python3 -m venv; never the project's .venv): the pinned
# import deps in requirements.lock, then verl==0.9.1 with --no-deps. PRL (default .venv/bin/prl)
# is used only to build the model and the data when they are not given.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VERL_VERSION=0.9.1
VENV="$REPO/bench/.envs/verl"
PRL="${PRL:-$REPO/.venv/bin/prl}"
ENV_ONLY=0 MODEL="" SYNTH="" WORK="$REPO/bench/.envs/verl-fixture-work" OUT="$REPO/tests/data/formats/verl"
COMMAND="bench/peers/verl/make_fixture.sh $*"

while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --synth) SYNTH="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --env-only) ENV_ONLY=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

# 2 shared cores: one thread everywhere
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 WANDB_MODE=disabled
export PYTHONHASHSEED=0

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"

# (a) + (b): verl's own venv
STAMP="$VENV/.prl-verl-stamp"
WANT="verl==$VERL_VERSION $(sha256sum "$HERE/requirements.lock" | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "== creating $VENV (verl==$VERL_VERSION)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # requirements.lock pins torch==2.13.0, inside the machine-wide pip constraint (torch<=2.14.1),
  # so no PIP_CONSTRAINT override is needed.
  "$VENV/bin/pip" install --quiet -r "$HERE/requirements.lock"
  "$VENV/bin/pip" install --quiet --no-deps "verl==$VERL_VERSION"
  "$VENV/bin/python" -c "import verl.trainer.ppo.ray_trainer" 2>/dev/null
  echo "$WANT" > "$STAMP"
fi
PY="$VENV/bin/python"
if [ "$ENV_ONLY" = 1 ]; then echo "== $VENV ready (verl==$VERL_VERSION)"; exit 0; fi

# the model
if [ -z "$MODEL" ]; then
  MODEL="$WORK/warm"
  if [ ! -f "$MODEL/model.safetensors" ]; then
    echo "== building the tiny model and warm-starting it (prl model sft, 300 steps, ~10 min on 1 thread)"
    rm -rf "$WORK/tiny" "$MODEL"
    "$PRL" model build-tiny --out "$WORK/tiny"
    "$PRL" model sft --model "$WORK/tiny" --out "$MODEL" --steps 300 --threads 1
  fi
fi
MODEL="$(cd "$MODEL" && pwd)"

# the data
if [ -z "$SYNTH" ]; then
  SYNTH="$WORK/synth"
  if [ ! -f "$SYNTH/synth_test.jsonl" ]; then
    echo "== writing the synthetic data set (prl data synth)"
    "$PRL" data synth --out "$SYNTH" --train 10
  fi
fi
SYNTH="$(cd "$SYNTH" && pwd)"

# (c) + (d): verl's validation path, dumping generations
echo "== running verl's RayPPOTrainer._validate (20 problems x 2 samples)"
"$PY" "$HERE/make_fixture.py" \
  --model "$MODEL" --test "$SYNTH/synth_test.jsonl" --train "$SYNTH/synth_train.jsonl" \
  --work "$WORK/run" --problems 20 --samples 2 --max-new-tokens 200 --seed 0 \
  --record "$WORK/run/record.json"

DUMP="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dump"])' "$WORK/run/record.json")"
mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl
cp "$DUMP" "$OUT/"
"$PY" "$HERE/write_provenance.py" --record "$WORK/run/record.json" --model "$MODEL" \
  --test "$SYNTH/synth_test.jsonl" --command "$COMMAND" --fixture "$OUT/$(basename "$DUMP")" \
  --out "$OUT/PROVENANCE.md"
echo "== wrote $OUT/$(basename "$DUMP") and $OUT/PROVENANCE.md"
sha256sum "$OUT/$(basename "$DUMP")"
