#!/usr/bin/env bash
# Prepare, on a machine with network, everything bench/gpu_check.sh needs on the lent GPU machine
# (NVIDIA H200, Python 3.12, torch/transformers already there, no network): see bench/GPU.md.
#
#   bash bench/gpu_prepare.sh            # writes .gpu/ (git-ignored) and prints the `run` call
#
# .gpu/wheels/         Python 3.12 manylinux x86_64 wheels of what the GPU image lacks and the
#                      training path (prl.training.train, engine hf) imports, each pinned, one version each
# .gpu/smollm2-config/ SmolLM2-135M-Instruct's config and tokenizer, no weights (gpu_check.sh initialises
#                      a random model of that architecture there)
#
# Environment:
#   PRL_GPU_WITH_TRANSFORMERS=1  also carry transformers 5.19.0 (pyproject's pin; the image has 5.17.0, which
#                                our code runs on: bench/GPU.md). Adds 12.6 MB.
#   PRL_PIP                      the pip to download with (default: .venv/bin/python -m pip)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
GPU=.gpu
WHEELS=$GPU/wheels
CONF=$GPU/smollm2-config
PY=${PRL_PYTHON:-$ROOT/.venv/bin/python}
read -r -a PIP <<<"${PRL_PIP:-$PY -m pip}"
KINDS=${PRL_DEVICE_KINDS:-/work/.library/device/KINDS.md}

[ -x "$PY" ] || { echo "error: $PY not found: install the project's virtualenv first (scripts/install.sh)" >&2; exit 1; }

# What the GPU image lacks, pinned (pyproject.toml's pins; the rest: the versions this .venv resolved).
# deepspeed: PyPI has only an sdist; it is built here into a py3-none-any wheel with no compiled ops.
DOWNLOAD=(
  hjson==3.1.0                  # deepspeed
  pydantic==2.14.4              # deepspeed (its config classes)
  pydantic-core==2.50.5         # pydantic
  annotated-types==0.8.0        # pydantic
  typing-inspection==0.4.5      # pydantic
  typing-extensions==4.16.0     # pydantic/pydantic-core need >= 4.16.0; the image's version is not recorded
  math-verify==0.9.0            # the verifier
  latex2sympy2_extended==1.11.0 # math-verify 0.9.0 pins it
  antlr4-python3-runtime==4.13.2  # latex2sympy2_extended (<= 4.13.2)
  duckdb==2.0.0                 # the store
)
BUILD=(deepspeed==0.19.8)
if [ "${PRL_GPU_WITH_TRANSFORMERS:-0}" = 1 ]; then
  DOWNLOAD+=(transformers==5.19.0)
fi

# ── 0. ignore .gpu/ (here and in a user's clone) ─────────────────────────────────────────────
EXCLUDE=$(git rev-parse --git-path info/exclude)  # .git may be a file (a worktree): ask git where it keeps it
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.gpu/' "$EXCLUDE" 2>/dev/null || echo '/.gpu/' >>"$EXCLUDE"
grep -qxF '/.gpu/' .gitignore 2>/dev/null || echo '/.gpu/' >>.gitignore

mkdir -p "$WHEELS" "$CONF"

# ── 1. wheels ────────────────────────────────────────────────────────────────────────────────
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
echo "== downloading ${#DOWNLOAD[@]} wheels for CPython 3.12 manylinux x86_64 into $WHEELS"
"${PIP[@]}" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
  -d "$WHEELS" "${DOWNLOAD[@]}"

echo "== building ${BUILD[*]} (DS_BUILD_OPS=0: no compiled ops, a pure-Python wheel)"
for spec in "${BUILD[@]}"; do
  DS_BUILD_OPS=0 nice "${PIP[@]}" wheel -q --no-deps -w "$WHEELS" "$spec"
done

# Keep exactly the pinned wheels: remove other versions and names left by earlier runs.
"$PY" - "$WHEELS" "${DOWNLOAD[@]}" "${BUILD[@]}" <<'PY'
import re, sys
from pathlib import Path
from packaging.utils import canonicalize_name, parse_wheel_filename

folder, specs = Path(sys.argv[1]), sys.argv[2:]
want = {canonicalize_name(s.split("==")[0]): s.split("==")[1] for s in specs}
seen = {}
for w in sorted(folder.glob("*.whl")):
    name, version, _, tags = parse_wheel_filename(w.name)
    if want.get(name) != str(version):
        print(f"   removing {w.name} (not pinned)")
        w.unlink()
        continue
    if name in seen:
        sys.exit(f"error: two wheels of {name}: {seen[name]} and {w.name}")
    seen[name] = w.name
missing = sorted(set(want) - set(seen))
if missing:
    sys.exit(f"error: no wheel for {', '.join(missing)}")
ds = [w for n, w in seen.items() if n == "deepspeed"]
if ds and not ds[0].endswith("-py3-none-any.whl"):
    sys.exit(f"error: {ds[0]} is not a pure-Python (py3-none-any) wheel")
for n, w in sorted(seen.items()):
    print(f"   {w}")
PY

# Every requirement of a carried wheel (markers evaluated for CPython 3.12 on Linux x86_64, extras
# skipped) must be carried too or be in the GPU image's package list (KINDS.md).
echo "== checking that each carried wheel's requirements are carried or in the GPU image ($KINDS)"
"$PY" - "$WHEELS" "$KINDS" <<'PY'
import re, sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

folder, kinds = Path(sys.argv[1]), Path(sys.argv[2])
image = set()
if kinds.is_file():
    text = kinds.read_text()
    m = re.search(r"## Python packages already there.*?Packages: (.*?)\.\s*$", text, re.S | re.M)
    if m:
        image = {canonicalize_name(x.strip()) for x in m.group(1).split(",") if x.strip()}
if not image:  # the list as read on 2026-11-17 (the names this check needs)
    print(f"   (no package list in {kinds}: using the snapshot in this script)")
    image = {canonicalize_name(x) for x in "einops msgpack ninja numpy packaging psutil py-cpuinfo torch tqdm sympy "
             "mpmath typing-extensions pyyaml jinja2 transformers tokenizers safetensors huggingface-hub pandas "
             "pyarrow regex typer filelock".split()}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
carried = {parse_wheel_filename(w.name)[0]: w for w in folder.glob("*.whl")}
bad = 0
for name, w in sorted(carried.items()):
    with zipfile.ZipFile(w) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        reqs = [l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]
    for r in map(Requirement, reqs):
        if r.marker is not None and not r.marker.evaluate(env):
            continue
        n = canonicalize_name(r.name)
        where = "carried" if n in carried else "image" if n in image else None
        if where is None:
            bad += 1
            print(f"   MISSING: {name} needs {r} — neither carried nor in the GPU image")
        elif where == "carried":
            v = parse_wheel_filename(carried[n].name)[1]
            if r.specifier and not r.specifier.contains(v, prereleases=True):
                bad += 1
                print(f"   CONFLICT: {name} needs {r}, carried {v}")
print(f"   {len(carried)} wheels, {'all requirements met' if not bad else f'{bad} problem(s)'} "
      "(the image's own versions are not checked: it records few)")
sys.exit(1 if bad else 0)
PY

# ── 2. SmolLM2-135M-Instruct: config and tokenizer only ───────────────────────────────────────
SRC=${PRL_CACHE:-$HOME/.cache/prl}/models/smollm2-135m-instruct
FILES=(config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja)
if [ ! -f "$SRC/config.json" ] || [ ! -f "$SRC/tokenizer.json" ]; then
  echo "== $SRC missing: importing SmolLM2-135M-Instruct (prl.models.importer.smollm2_model, fetches a ~98 MB GGUF once)"
  "$PY" -c "from prl.models.importer import smollm2_model; print(smollm2_model(log=print))"
fi
echo "== copying SmolLM2-135M-Instruct's config and tokenizer (no weights) into $CONF"
rm -f "$CONF"/*
for f in "${FILES[@]}"; do
  [ -f "$SRC/$f" ] || { echo "error: $SRC/$f missing" >&2; exit 1; }
  cp "$SRC/$f" "$CONF/"
done

# What was prepared, from which commit (gpu_check.sh copies it into its result).
"$PY" - "$GPU" <<'PY'
import json, subprocess, sys, time
from pathlib import Path

gpu = Path(sys.argv[1])
def git(*a):
    r = subprocess.run(["git", "--no-optional-locks", *a], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None
status = git("status", "--porcelain", "--untracked-files=no")
info = {"prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": git("rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
        "wheels": sorted(p.name for p in (gpu / "wheels").glob("*.whl")),
        "model_config": sorted(p.name for p in (gpu / "smollm2-config").iterdir())}
(gpu / "prepared.json").write_text(json.dumps(info, indent=1) + "\n")
PY

# ── 3. sizes and the call to make ─────────────────────────────────────────────────────────────
echo "== sizes (the run tool's limit: 64 MiB for the tree and the carried paths together)"
for d in "$WHEELS" "$CONF"; do du -sh "$d"; done
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
gpu_bytes=$(du -sb "$GPU" | cut -f1)
total=$((tree_bytes + gpu_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "   tree (tracked + untracked, not ignored): $(mib "$tree_bytes")"
echo "   .gpu (carried):                          $(mib "$gpu_bytes")"
echo "   total that travels:                      $(mib "$total")"
if [ "$total" -gt $((60 * 1048576)) ]; then
  echo "error: over 60 MiB; the run tool refuses more than 64 MiB" >&2
  exit 1
fi

cat <<'EOF'
== the device call (the `run` tool; one call, ~5 min of the 15 device minutes; bench/GPU.md)
run(carry=[".gpu"], timeout_s=300,
    command="set -o pipefail; bash bench/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log")
   gpu_check.sh ends itself after PRL_GPU_CHECK_DEADLINE_S (default 270 s, model load included) and writes $OUT/gpu_check.json
   (with its log, $OUT/gpu_check.log); then call give_back unless rerunning at once.
EOF
