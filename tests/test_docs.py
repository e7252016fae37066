"""The project's own documents hold against the tree.

- README's *Layout* block names only paths that exist, and names every package and module of
  ``prl_core`` and ``prl`` (and the other top-level packages).
- Design references point into the repository: nothing cites the old external design notes, and every
  ``docs/architecture.md §<section>`` reference names a heading of docs/architecture.md.

Layout block format: an entry line starts at an even indent of at most 6 spaces with a path (a folder
ending in ``/`` or a file), relative to the repository root at indent 0 and to the enclosing folder entry
otherwise; deeper-indented lines continue the entry's description. A path mentioned in a description
(``name.py``, ``sub/``, ``sub/name.md``) is relative to the entry's folder, or else to the root.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TOP_PACKAGES = ("prl_core", "prl", "flows", "prl_cli", "dashboard")
FULLY_LISTED = ("prl_core", "prl")  # every module of these is named in the Layout block

_EXTENSIONS = "py|sql|md|yaml|yml|sh|json|jsonl|jinja|csv|toml|txt|lock"
_ENTRY_PATH = re.compile(rf"^(?:[\w.-]+/)*[\w.-]+(?:/|\.(?:{_EXTENSIONS}))$")
_MENTIONED = re.compile(rf"(?<![\w./*-])((?:[\w.*-]+/)*[\w.*-]+\.(?:{_EXTENSIONS})(?![\w/])|(?:[\w.*-]+/)+(?![\w.*-]))")
_MAX_ENTRY_INDENT = 6

_OLD_REFERENCE = "DESIGN" + " §"  # spelled in two parts so that this file does not contain it
_REFERENCE = re.compile(r"docs/architecture\.md\s+§")
_HEADING = re.compile(r"^#{2,6}\s+(?:\d+(?:\.\d+)*\.?\s+)?(.+?)\s*$")


# ─── the files of the repository ──────────────────────────────────────────────────────────────────

def repository_files() -> list[Path]:
    """Tracked files and untracked ones git does not ignore (the virtual environment excluded); without
    git, every file outside the ignored folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True, timeout=60).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", "__pycache__", "runs", "artifacts", "build", ".pytest_cache", ".hypothesis"}
        names = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if x not in skip and not x.endswith(".egg-info")
                       and not (Path(d).name == "bench" and x in (".envs", "out"))]
            names += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
    return [ROOT / n for n in names if n.split("/")[0] != ".venv" and (ROOT / n).is_file()]


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="ignore")


# ─── README's Layout block ────────────────────────────────────────────────────────────────────────

def layout_block(readme: str | None = None) -> str:
    text = readme if readme is not None else (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Layout\s*$.*?^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert m, "README.md: no ```-fenced block under '## Layout'"
    return m.group(1)


def layout_paths(block: str) -> tuple[list[Path], list[tuple[str, Path]]]:
    """(the entries' paths, [(a path mentioned in a description, the folder it is relative to)])."""
    entries: list[Path] = []
    mentions: list[tuple[str, Path]] = []
    stack: list[tuple[int, Path]] = []  # (indent, folder) of the enclosing folder entries
    base = ROOT
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        rest = line.strip()
        if indent <= _MAX_ENTRY_INDENT:
            assert indent % 2 == 0, f"Layout: entry indented by {indent} spaces (use 0, 2, 4 or 6): {line!r}"
            token, _, rest = rest.partition(" ")
            assert _ENTRY_PATH.match(token), f"Layout: an entry must start with a path: {line!r}"
            while stack and stack[-1][0] >= indent:
                stack.pop()
            assert indent == 0 or stack, f"Layout: {line!r} is indented but not inside a folder entry"
            path = (stack[-1][1] if stack else ROOT) / token.rstrip("/")
            entries.append(path)
            base = path if token.endswith("/") else path.parent
            if token.endswith("/"):
                stack.append((indent, path))
        mentions += [(m, base) for m in _MENTIONED.findall(rest)]
    return entries, mentions


def _exists(name: str, base: Path) -> Path | None:
    for folder in (base, ROOT):
        hits = list(folder.glob(name.rstrip("/"))) if "*" in name else [folder / name.rstrip("/")]
        hits = [h for h in hits if h.exists() and (h.is_dir() or not name.endswith("/"))]
        if hits:
            return hits[0]
    return None


def test_every_path_the_layout_names_exists():
    entries, mentions = layout_paths(layout_block())
    assert len(entries) > 20 and len(mentions) > 50  # the block was parsed, not skipped
    missing = [str(p.relative_to(ROOT)) for p in entries if not p.exists()]
    missing += [f"{name} (under {base.relative_to(ROOT) or '.'})" for name, base in mentions if not _exists(name, base)]
    assert missing == [], "README.md's Layout names paths that do not exist: " + ", ".join(missing)


def test_the_layout_names_every_package_and_module():
    entries, mentions = layout_paths(layout_block())
    named = {p.resolve() for p in entries} | {p.resolve() for n, b in mentions if (p := _exists(n, b))}
    packages = [ROOT / top for top in TOP_PACKAGES]
    packages += [p.parent for top in FULLY_LISTED for p in (ROOT / top).rglob("__init__.py")
                 if "__pycache__" not in p.parts]
    modules = [p for top in FULLY_LISTED for p in (ROOT / top).rglob("*.py")
               if p.name != "__init__.py" and "__pycache__" not in p.parts]
    unnamed = sorted(str(p.relative_to(ROOT)) for p in {*packages, *modules} if p.resolve() not in named)
    assert unnamed == [], "README.md's Layout does not name: " + ", ".join(unnamed)


def test_the_layout_parser_sees_a_missing_path_and_a_missing_package():
    block = layout_block().replace("  imports/ ", "  importz/ ").replace("tiny.py (", "tiny_model.py (")
    entries, mentions = layout_paths(block)
    assert ROOT / "prl" / "importz" in entries and not (ROOT / "prl" / "importz").exists()
    assert ("tiny_model.py", ROOT / "prl" / "models") in mentions
    assert all(p != ROOT / "prl" / "imports" for p in entries)


# ─── design references ────────────────────────────────────────────────────────────────────────────

def architecture_sections() -> list[str]:
    """The headings of docs/architecture.md without their numbers ('The PRL math', 'Steps', …)."""
    return [m.group(1) for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines()
            if (m := _HEADING.match(line))]


def unknown_references(text: str, sections: list[str]) -> list[str]:
    """The ``docs/architecture.md §…`` references in ``text`` that start with no section's name."""
    bad = []
    for m in _REFERENCE.finditer(text):
        after = re.sub(r"\s+", " ", text[m.end():m.end() + 200])
        if after.startswith(("<", "…")):  # the form itself, as documents describe it: §<section name>
            continue
        if not any(after.startswith(s) and not after[len(s):len(s) + 1].isalnum() for s in sections):
            bad.append("§" + after[:50])
    return bad


def test_nothing_cites_the_external_design_notes():
    offenders = [str(p.relative_to(ROOT)) for p in repository_files() if _OLD_REFERENCE in _text(p)]
    assert offenders == [], (f"{_OLD_REFERENCE!r} points at a document outside the repository; cite "
                             "docs/architecture.md §<section> instead: " + ", ".join(offenders))


def test_every_architecture_reference_names_a_section():
    sections = architecture_sections()
    assert {"Layers", "Where each concept lives", "The PRL math", "Evaluation protocol", "The store",
            "Departures from the paper and the authors' code"} <= set(sections)
    found, bad = 0, []
    for path in repository_files():
        if path == Path(__file__).resolve():  # this file's examples of bad references
            continue
        text = _text(path)
        found += len(_REFERENCE.findall(text))
        bad += [f"{path.relative_to(ROOT)}: {b}" for b in unknown_references(text, sections)]
    assert found >= 40  # the references are there and the pattern finds them
    assert bad == [], "references to sections docs/architecture.md does not have:\n" + "\n".join(bad)


def test_a_reference_to_a_missing_section_is_caught():
    sections = architecture_sections()
    assert unknown_references("see docs/architecture.md §The PRL math.", sections) == []
    assert unknown_references("(docs/architecture.md §The\n    worked example)", sections) == []
    assert unknown_references("docs/architecture.md §The PRL mathematics", sections) != []
    assert unknown_references("docs/architecture.md §2", sections) != []
