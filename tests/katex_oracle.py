"""The KaTeX that Streamlit's Markdown renders math with, run by Node.js: the oracle for
``dashboard.math_text.katex_ok``.

``st.markdown`` typesets ``$…$`` through rehype-katex, whose chunk in Streamlit's static bundle
carries its own copy of KaTeX (0.16.47 in Streamlit 1.67; ``st.latex`` uses another, 0.18.10).
:func:`katex_errors` loads that chunk (and the chunks it imports) as ES modules, exports its KaTeX
object, and renders each (latex, display) the way rehype-katex first tries it (``throwOnError``,
default ``strict``), returning the error message of each or None. Needs ``node`` (tests skip
without it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import streamlit

JS = Path(streamlit.__file__).parent / "static" / "static" / "js"

SCRIPT = r"""
import { readFileSync } from "node:fs";
// the chunk's HTML helpers touch the DOM when loaded; KaTeX's renderToString needs none of it
globalThis.DOMParser ??= class { parseFromString() { return { body: { childNodes: [] } }; } };
globalThis.document ??= { createElement: () => ({}) };
const { __katex: katex } = await import("./entry.js");
const items = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = items.map(([t, d]) => {
  try { katex.renderToString(t, {throwOnError: true, displayMode: d, strict: "ignore"}); return null; }
  catch (e) { return String(e.message); }
});
process.stdout.write(JSON.stringify({version: katex.version, errors: out}));
"""


def _chunk() -> Path | None:
    found = sorted(JS.glob("rehype-katex.*.js"))
    return found[0] if found else None


def available() -> bool:
    return shutil.which("node") is not None and _chunk() is not None


def _bundle(into: Path) -> None:
    """The rehype-katex chunk as ``entry.js`` with its KaTeX object exported, beside the chunks it imports."""
    chunk = _chunk()
    text = chunk.read_text()
    m = re.search(r"[,;{\s](\w+)=\{version:`[0-9.]+`,render:", text)
    if m is None:
        raise RuntimeError(f"{chunk}: no KaTeX object found in the chunk")
    (into / "entry.js").write_text(text + f"\nexport{{{m.group(1)} as __katex}};\n")
    todo = re.findall(r"""from\s*["']\./([^"']+)["']""", text)
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dep = (JS / name).read_text()
        (into / name).write_text(dep)
        todo += re.findall(r"""from\s*["']\./([^"']+)["']""", dep)
        todo += re.findall(r"""import\s*["']\./([^"']+)["']""", dep)
    (into / "package.json").write_text('{"type": "module"}')


def katex_errors(items: list[tuple[str, bool]]) -> tuple[str, list[str | None]]:
    """(KaTeX version, the error of each item or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        _bundle(d)
        (d / "check.js").write_text(SCRIPT)
        (d / "items.json").write_text(json.dumps(items))
        out = subprocess.run(["node", str(d / "check.js"), str(d / "items.json")], cwd=d, capture_output=True,
                             text=True, timeout=600)
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        res = json.loads(out.stdout)
        return res["version"], res["errors"]
