#!/usr/bin/env bash
# Make bench/.envs/trl (gitignored): the venv in which bench/peers/trl/grpo_step.py runs TRL's GRPOTrainer, the
# peer of our own GRPO training step in the CPU step-time benchmark. Then write bench/peers/trl/requirements.lock
# (pip freeze of that venv) next to this script.
#
#   bench/peers/trl/make_env.sh [--force]
#
#   --force   rebuild the venv from scratch even if it already has the pinned trl.
#   TRL_ENV=DIR  another venv folder (for testing this script); the lock file is still written next to this script.
#
# Steps: (a) venv at bench/.envs/trl with python3 -m venv (never the project's .venv); (b) pip install the pins
# below: trl, with the same torch/transformers/tokenizers/accelerate pins as pyproject.toml (the tiny model's files
# are written by transformers 5.x: tokenizer_class TokenizersBackend), and the CPU torch wheel; (c) an import check
# of trl's GRPOTrainer; (d) pip freeze > requirements.lock. Idempotent: when the venv already has trl==TRL_VERSION
# and imports it, (b) and (c) are skipped and only the lock file is rewritten.
#
# Versions: trl 1.16.0 is the newest trl on PyPI when this was written (2026-12); it asks for transformers>=4.56.2,
# accelerate>=1.10.1, datasets>=4.7.0, so it installs with transformers 5.19.0 and accelerate 1.15.0 as pinned.
# torch==2.13.0 resolves to 2.13.0+cpu from this machine's find-links (/opt/wheels, set in /etc/pip.conf): pip
# ranks the local-version wheel above PyPI's plain 2.13.0, so no CUDA wheels are pulled in.
#
# pip constraints: this machine's pip config sets a global constraint file (/etc/xdg/pip/constraints.txt:
# torch<=2.14.1, torchvision<=0.29.1). It does not conflict with these pins (torch==2.13.0), so it is left in
# force. Should it ever conflict, rerun with TRL_PIP_NO_CONSTRAINT=1, which runs pip with PIP_CONSTRAINT=/dev/null
# so that only the pins below apply (the environment variable replaces the config file's constraint; an empty
# PIP_CONSTRAINT= does not, and `--constraint /dev/null` on the command line only adds to it).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
ENV_DIR="${TRL_ENV:-$REPO/bench/.envs/trl}"
LOCK="$HERE/requirements.lock"

TRL_VERSION="1.16.0"
PINS=(
  "trl==$TRL_VERSION"
  "torch==2.13.0"                         # CPU wheel (2.13.0+cpu), from the find-links in /etc/pip.conf
  "transformers==5.19.0"
  "tokenizers==0.23.3"
  "accelerate==1.15.0"
  "datasets==5.2.0"                       # trl needs >=4.7.0; 5.2.0 is the newest, and the one the verl env uses
)

FORCE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "make_env.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

have_trl() {
  "$ENV_DIR/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('trl') != '$TRL_VERSION')" 2>/dev/null
}

if [[ "$FORCE" == 1 ]]; then
  echo "== --force: removing $ENV_DIR"
  rm -rf "$ENV_DIR"
fi

# (a) the venv.
if [[ ! -x "$ENV_DIR/bin/python" ]]; then
  echo "== creating $ENV_DIR"
  mkdir -p "$(dirname "$ENV_DIR")"
  python3 -m venv "$ENV_DIR"
fi

# (b) + (c) the pinned trl.
if have_trl && "$ENV_DIR/bin/python" -c "from trl import GRPOConfig, GRPOTrainer" 2>/dev/null; then
  echo "== $ENV_DIR already has trl==$TRL_VERSION; skipping pip install"
else
  echo "== pip install ${PINS[*]}"
  if [[ "${TRL_PIP_NO_CONSTRAINT:-0}" == 1 ]]; then
    PIP_CONSTRAINT=/dev/null "$ENV_DIR/bin/pip" install "${PINS[@]}"
  else
    "$ENV_DIR/bin/pip" install "${PINS[@]}"
  fi
  have_trl || { echo "make_env.sh: trl==$TRL_VERSION is not in $ENV_DIR after pip install" >&2; exit 1; }
  "$ENV_DIR/bin/python" -c "from trl import GRPOConfig, GRPOTrainer"
fi

# (d) the lock file: what is installed, exactly (pip itself left out).
{
  echo "# pip freeze of bench/.envs/trl, made by bench/peers/trl/make_env.sh (python3 -m venv; pins: ${PINS[*]})."
  echo "# $("$ENV_DIR/bin/python" --version 2>&1); regenerate with bench/peers/trl/make_env.sh."
  "$ENV_DIR/bin/pip" freeze --all --exclude pip
} > "$LOCK.tmp"
mv "$LOCK.tmp" "$LOCK"
echo "== wrote $LOCK ($(grep -vc '^#' "$LOCK") packages)"
"$ENV_DIR/bin/python" -c "import trl, torch, transformers, accelerate, datasets; print('== trl', trl.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__, '| datasets', datasets.__version__)"
