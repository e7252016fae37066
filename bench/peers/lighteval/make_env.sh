#!/usr/bin/env bash
# Make bench/.envs/lighteval (gitignored): a venv holding the lighteval release that scored the Saturn-1.5B
# AIME24 details of shared/data/external/lighteval-saturn-1.5b/, for bench/peers/lighteval/verify.py (its
# math metric "extractive_match" on outside responses). Writes bench/peers/lighteval/requirements.lock.
#
#   bench/peers/lighteval/make_env.sh [--force]
#
#   --force   rebuild the venv even if its stamp says it is up to date.
#
# Version: that file's results JSON says lighteval_sha 9c05a83ad795e37efdc89ac60943f6623b9ae633 (2025-03-21,
# "log model config (#627)"). The next release tag, v0.8.0 (2025-03-24), contains it and differs from it only in
# main_tasks.py and metrics/llm_as_judge.py (a custom-task CLI helper, a judge option): nothing under the math
# metric. v0.8.0 never reached PyPI; the PyPI wheel lighteval==0.8.1 has the same source tree as tag v0.8.0,
# file for file (checked: git archive v0.8.0 src/lighteval vs the unpacked wheel, diff -r: no difference).
# So lighteval[math]==0.8.1, whose math extra pins latex2sympy2_extended==1.0.6.
#
# The metric needs sympy + latex2sympy2_extended only, but `import lighteval.metrics.dynamic_metrics` runs
# lighteval/metrics/__init__.py, which imports the whole metric zoo (torch via bert_scorer/model_output,
# transformers, nltk, sacrebleu, scikit-learn, datasets, ...). So lighteval goes in with its own dependencies,
# plus:
#   torch==2.13.0        the CPU wheel in /opt/wheels (PIP_FIND_LINKS); nothing GPU. It is imported, never run.
#   transformers==4.49.0 Saturn-code's requirements.txt pin (what that run had); lighteval 0.8.1 predates 5.x.
#   sympy==1.13.3        the math comparison runs on sympy. Saturn-code's requirements.txt pins torch==2.5.1 (and
#                        an unpinned lighteval), and torch 2.5.1 pins sympy==1.13.1; torch 2.13.0 asks
#                        sympy>=1.13.3, so the nearest allowed, two bug-fix releases later.
#   datasets, pyarrow, pandas, scipy, scikit-learn: held at spring-2025 releases, see PINS (numpy<2).
#
# pip constraints: this machine's pip config sets a global constraint file (/etc/xdg/pip/constraints.txt:
# torch<=2.14.1, torchvision<=0.29.1). It does not conflict with these pins, so it is left in force. Should it
# ever conflict, rerun with LIGHTEVAL_PIP_NO_CONSTRAINT=1 (pip runs with PIP_CONSTRAINT=/dev/null; as in
# bench/peers/lm_eval/make_fixture.sh, the environment variable replaces the config file's constraint).
#
# Idempotent: a stamp in the venv records the pins; when they match (and the venv imports the metric) nothing
# is installed, only requirements.lock is rewritten (pip freeze). The project's .venv is never touched.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
ENV_DIR="${LIGHTEVAL_ENV:-$REPO/bench/.envs/lighteval}"   # LIGHTEVAL_ENV: another venv folder (for testing this script)

LIGHTEVAL_VERSION="0.8.1"
PINS=(
  "lighteval[math]==$LIGHTEVAL_VERSION"
  "torch==2.13.0"
  "transformers==4.49.0"
  "sympy==1.13.3"
  # lighteval 0.8.1 pins numpy<2; today's pyarrow (26.x) refuses numpy 1.x at import (datasets imports it), and
  # pip does not know that. So the array stack is held at its spring-2025 releases (datasets 3.5.0 is of
  # 2025-03-27), all built for numpy 1.26:
  "datasets==3.5.0"
  "pyarrow==19.0.1"
  "pandas==2.2.3"
  "scipy==1.15.2"
  "scikit-learn==1.6.1"
)

FORCE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,34p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "make_env.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

STAMP="$ENV_DIR/.prl-lighteval-stamp"
WANT="${PINS[*]}"
CHECK="import importlib.metadata as m, sys; import lighteval.metrics.dynamic_metrics; sys.exit(m.version('lighteval') != '$LIGHTEVAL_VERSION')"
if [[ "$FORCE" == 1 || ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]] \
   || ! "$ENV_DIR/bin/python" -c "$CHECK" >/dev/null 2>&1; then
  echo "== creating $ENV_DIR (${PINS[*]})"
  if [[ -e "$ENV_DIR" && ! -f "$ENV_DIR/pyvenv.cfg" ]]; then
    echo "make_env.sh: $ENV_DIR exists and is not a venv; not removing it" >&2; exit 1
  fi
  rm -rf "$ENV_DIR"
  python3 -m venv "$ENV_DIR"
  "$ENV_DIR/bin/pip" install --quiet --upgrade pip
  if [[ "${LIGHTEVAL_PIP_NO_CONSTRAINT:-0}" == 1 ]]; then
    PIP_CONSTRAINT=/dev/null "$ENV_DIR/bin/pip" install "${PINS[@]}"
  else
    "$ENV_DIR/bin/pip" install "${PINS[@]}"
  fi
  "$ENV_DIR/bin/pip" check
  "$ENV_DIR/bin/python" -c "$CHECK"
  echo "$WANT" > "$STAMP"
fi

{
  echo "# pip freeze of bench/.envs/lighteval, made by bench/peers/lighteval/make_env.sh from the pins:"
  echo "#   ${PINS[*]}"
  echo "# (torch is the CPU wheel from /opt/wheels; python $("$ENV_DIR/bin/python" -c 'import platform; print(platform.python_version())'))"
  "$ENV_DIR/bin/pip" freeze --all --exclude-editable | grep -v '^pip=='
} > "$HERE/requirements.lock"
echo "== $ENV_DIR ready: lighteval $("$ENV_DIR/bin/python" -c 'import importlib.metadata as m; print(m.version("lighteval"))'); wrote $HERE/requirements.lock"
