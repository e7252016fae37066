"""The architecture holds: the import-linter contracts of pyproject.toml (layers prl_core ← prl ←
flows | dashboard ← prl_cli, the application's subpackages in order, no import cycles, Prefect only in
flows and the CLI, no YAML reader in prl_core) pass on the code as it is, and a violation is reported (the tool is really checking)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_are_kept():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "5 kept, 0 broken" in r.stdout


def test_an_upward_import_a_cycle_and_prefect_below_flows_break_the_contracts(tmp_path):
    copy = tmp_path / "repo"
    for name in ("prl_core", "prl", "flows", "dashboard", "prl_cli"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "benchmarks"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    with (copy / "prl" / "data" / "paper.py").open("a") as f:
        f.write("\n\ndef _upward():\n    import flows.report  # noqa: F401\n")
    with (copy / "prl" / "evaluation" / "shards.py").open("a") as f:
        f.write("\n\ndef _cycle():\n    from prl.evaluation import evaluate  # noqa: F401\n")
    with (copy / "prl" / "training" / "exports.py").open("a") as f:
        f.write("\n\ndef _event():\n    from prefect.events import emit_event  # noqa: F401\n")
    r = _lint(copy)
    assert r.returncode != 0
    assert "prl.data.paper -> flows.report" in r.stdout
    assert ".shards -> .evaluate" in r.stdout
    assert "prl.training.exports -> prefect" in r.stdout


def test_the_wheel_ships_every_package_and_the_sql(tmp_path):
    """pyproject.toml lists the packages (prl.sql is the top-level sql/ folder, which a find cannot see):
    the list is complete, and an installed prl has its SQL files and bundled data."""
    import tomllib
    import zipfile

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for root in ("prl_core", "prl", "prl_cli", "flows", "dashboard")
               for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts}
    assert listed == on_disk | {"prl.sql", "prl.model_configs"}  # the two folders mapped in package-dir
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    assert {"prl/sql/schema.sql", "prl/sql/queries.sql", "prl/data/benchmarks/math500.jsonl",
            "prl/data/paper_tables.csv", "prl_cli/main.py", "prl/model_configs/Qwen2.5-Math-1.5B/config.json",
            "prl/model_configs/Qwen2.5-Math-1.5B/prl_model.json", "prl/models/assets/qwen2.5/added_tokens.json",
            "prl/models/assets/qwen2.5/chat_template.jinja"} <= set(names)
