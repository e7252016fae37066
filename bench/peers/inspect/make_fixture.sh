#!/usr/bin/env bash
# Make tests/data/formats/inspect/prl_synth_tiny_warm.eval: a REAL Inspect AI log (Inspect's own
# binary `.eval` format, written by `inspect eval` itself) for `prl import --format inspect`'s tests.
#
#   bench/peers/inspect/make_fixture.sh [--model DIR] [--data FILE] [--seed N] [--work DIR] [--keep-work]
#
#   --model DIR  HF directory of the project's tiny model warm-started on the synthetic arithmetic task.
#                Without it one is built (~10 min on one core):
#                  prl model build-tiny --out W/tiny && prl model sft --model W/tiny --out W/warm --steps 300 --threads 1
#   --data FILE  a `prl data synth` synth_test.jsonl; without it: prl data synth --out W/synth --train 10
#   --seed N     Inspect's --seed (default 6); the hf provider seeds torch with it, so a run is
#                reproducible on one machine. Seed 6 was picked from seeds 0-11 for the most correct
#                responses (3 of 40 with /work/fx/warm; 4 seeds gave none)
#   --work DIR   scratch directory (default: a fresh mktemp -d, removed at the end unless --keep-work)
#
# Steps: (a) venv bench/.envs/inspect (python3 -m venv; gitignored), (b) pip install the pins in
# requirements.txt next to this script, (c) `inspect eval prl_synth_task.py --model hf/prl-tiny-warm`
# (a local directory, HF_HUB_OFFLINE=1) with --log-format eval, (d) copy the log into
# tests/data/formats/inspect/ and print its sha256.
#
# Environment: PRL (default <repo>/.venv/bin/prl), PYTHON (default python3), PIP_CONSTRAINT (passed to
# pip as is; this machine's global constraints file, torch<=2.14.1, does not conflict with the pins).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
ENV_DIR="$REPO/bench/.envs/inspect"
DEST_DIR="$REPO/tests/data/formats/inspect"
DEST="$DEST_DIR/prl_synth_tiny_warm.eval"
PRL="${PRL:-$REPO/.venv/bin/prl}"
PYTHON="${PYTHON:-python3}"

MODEL="" DATA="" SEED=6 WORK="" KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --model) MODEL="$(cd "$2" && pwd)"; shift 2 ;;
        --data) DATA="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
        --seed) SEED="$2"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        --keep-work) KEEP=1; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

# Small and offline: one thread (the machine is shared), no Hugging Face hub.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

if [[ -z "$WORK" ]]; then
    WORK="$(mktemp -d -t prl-inspect-fixture.XXXXXX)"
    [[ $KEEP -eq 1 ]] || trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
echo "[fixture] work dir: $WORK"

# (a) + (b): the Inspect env, separate from the project's .venv.
if [[ ! -x "$ENV_DIR/bin/python" ]]; then
    echo "[fixture] creating $ENV_DIR"
    "$PYTHON" -m venv "$ENV_DIR"
fi
echo "[fixture] installing $(grep -v '^#' "$HERE/requirements.txt" | xargs)"
"$ENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
INSPECT_VERSION="$("$ENV_DIR/bin/python" -c 'import inspect_ai; print(inspect_ai.__version__)')"
echo "[fixture] inspect_ai $INSPECT_VERSION"

# The model: a warm-started tiny model (built with the project's CLI when not given).
if [[ -z "$MODEL" ]]; then
    echo "[fixture] building the tiny model and warm-starting it (prl model build-tiny / sft)"
    "$PRL" model build-tiny --out "$WORK/tiny"
    "$PRL" model sft --model "$WORK/tiny" --out "$WORK/warm" --steps 300 --threads 1
    MODEL="$WORK/warm"
fi
[[ -f "$MODEL/config.json" ]] || { echo "no HF model in $MODEL" >&2; exit 2; }

# The data: prl's synthetic arithmetic test split (deterministic in its seed).
if [[ -z "$DATA" ]]; then
    "$PRL" data synth --out "$WORK/synth" --train 10
    DATA="$WORK/synth/synth_test.jsonl"
fi

# (c) Run Inspect inside $WORK, on relative names, so the log records `hf/prl-tiny-warm` and
# `data=synth_test.jsonl` rather than this machine's paths.
RUN="$WORK/run"
rm -rf "$RUN" && mkdir -p "$RUN/logs"
ln -s "$MODEL" "$RUN/prl-tiny-warm"
cp "$DATA" "$RUN/synth_test.jsonl"
cp "$HERE/prl_synth_task.py" "$RUN/prl_synth_task.py"
(
    cd "$RUN"
    "$ENV_DIR/bin/inspect" eval prl_synth_task.py@prl_synth \
        -T data=synth_test.jsonl -T limit=20 -T epochs=2 -T temperature=1.0 -T max_tokens=200 \
        --model hf/prl-tiny-warm \
        --seed "$SEED" \
        --log-format eval --log-dir logs \
        --display plain
)
shopt -s nullglob
LOGS=("$RUN"/logs/*.eval)
[[ ${#LOGS[@]} -eq 1 ]] || { echo "expected one .eval log in $RUN/logs, found ${#LOGS[@]}" >&2; exit 1; }

# Sanity: a finished run, 20 samples x 2 epochs, each scored C or I, and both labels present.
"$ENV_DIR/bin/python" - "${LOGS[0]}" <<'EOF'
import collections, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
assert log.status == "success", log.status
values = collections.Counter(s.scores["pattern"].value for s in log.samples)
epochs = collections.Counter(s.epoch for s in log.samples)
acc = log.results.scores[0].metrics["accuracy"].value
print(f"[fixture] {len(log.samples)} samples, epochs {dict(epochs)}, scores {dict(values)}, accuracy {acc:.3f}")
assert len(log.samples) == 40 and set(values) <= {"C", "I"}, "unexpected samples/scores"
if len(values) < 2:
    sys.exit("[fixture] every response got the same label; rerun with another --seed for mixed labels")
EOF

# (d) Into the repo.
SIZE=$(stat -c %s "${LOGS[0]}")
[[ $SIZE -lt 1048576 ]] || { echo "log is $SIZE bytes (>= 1 MB)" >&2; exit 1; }
mkdir -p "$DEST_DIR"
cp "${LOGS[0]}" "$DEST"
echo "[fixture] original log name: $(basename "${LOGS[0]}")"
echo "[fixture] wrote $DEST ($SIZE bytes)"
sha256sum "$DEST"
