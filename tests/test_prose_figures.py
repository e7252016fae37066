"""No measured figure outside a generated region of README.md and bench/RESULTS.md.

Every figure there comes from a results file that a command regenerates (bench/render.py renders the
regions); the prose around them explains and points, and says in words what a one-off investigation
found. This test finds measurement-shaped numbers in the prose — a number with a unit of time, memory,
speed, a ratio or a share (`12 s`, `~0.45 s`, `513 MiB`, `2.25×`, `91.6%`, `+1.8 pp`, `5.2k tok/s`) —
outside the regions, fenced code and inline code. Targets and limits (a number after ≥, ≤, <, >, ±, "up to",
"within" or "target"), settings written as such, and facts that are not measurements (a model's size
from its parameter count) are not figures; each kind of exception is a rule below, not a list of lines.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("README.md", "bench/RESULTS.md")

REGION = re.compile(r"<!-- figures:(\w+) -->.*?<!-- /figures:\1 -->", re.S)
FENCE = re.compile(r"```.*?```", re.S)
INLINE = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
UNIT = r"(?:×|x\b|%|pp\b|ms\b|s\b|min\b|h\b|GiB\b|MiB\b|GB\b|MB\b|kB\b|KiB\b|tok/s\b|k tok/s\b|k\b)"
FIGURE = re.compile(r"(?<![\w.])([~≈]?\s?[+−-]?\d[\d,]*(?:\.\d+)?)\s?(" + UNIT + r")")
# An accuracy or share written as a fraction with three or more decimals (0.3000, 0.725) is a measurement
# too, unless it is a constant being defined (C = 0.357374).
FRACTION = re.compile(r"(?<![\w.=])(?<!= )(0\.\d{3,})\b")
# A number right after one of these is a target, a limit or a bound someone set, not a measurement.
BOUND = re.compile(r"(?:≥|≤|<|>|±|up to|within|target|at most|at least|under|over|every|limit|cap(?:ped)? at|"
                   r"default|e\.g\.|than|reaching)\s*[~≈]?\s*$", re.I)
# ... and so is a number right before one of these: a target, a limit, a setting, a machine's size, a
# confidence level, a table's dimensions (2×2), or part of a name (H100-80GB).
SETTING_AFTER = re.compile(r"^(?:\d|\s*(?:target|(?:wall-clock )?limit|machine|by default|CIs?\b|confidence))", re.I)


def figures_outside_regions(text: str) -> list[tuple[int, str]]:
    """(line number, the figure with its line) for each measurement-shaped number outside regions and code."""
    blanked = text
    for pattern in (REGION, FENCE, INLINE, LINK_TARGET):
        blanked = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), blanked)
    found = []
    for lineno, line in enumerate(blanked.splitlines(), 1):
        for m in FIGURE.finditer(line):
            before, after = line[: m.start()], line[m.end():]
            if BOUND.search(before) or SETTING_AFTER.match(after) or before.endswith("-"):
                continue
            number, unit = m.group(1), m.group(2)
            if unit in ("x",) and not re.match(r"\d", number.strip("~≈ ")):
                continue
            found.append((lineno, f"{number}{unit}: {line.strip()[:160]}"))
        found += [(lineno, f"{m.group(1)}: {line.strip()[:160]}") for m in FRACTION.finditer(line)]
    return found


def test_the_scanner_finds_figures_and_skips_targets_and_regions():
    text = ("It took 12 s and 2.25× more (5.2k tok/s).\n"
            "The target is ≥ 20× and the suite must stay under 20 min; the 3× target; a 2×2 table; 95% CIs;\n"
            "a 3 s wall-clock limit on a 2-core, 24 GiB machine with an H100-80GB; reaching 5× would need more.\n"
            "The published 0.6506, a 0.85 M model, C = 0.357374.\n"
            "<!-- figures:x -->\n91.6% recall\n<!-- /figures:x -->\n"
            "```\nprl eval --limit 20%\n```\n`0.45 s` inline.\n")
    found = [f.split(":")[0] for _, f in figures_outside_regions(text)]
    assert found == ["12s", "2.25×", "5.2k tok/s", "0.6506"]


def test_no_measured_figure_sits_outside_the_generated_regions():
    problems = []
    for name in FILES:
        for lineno, what in figures_outside_regions((ROOT / name).read_text(encoding="utf-8")):
            problems.append(f"{name}:{lineno}: {what}")
    assert not problems, ("measured figures outside a generated region (render them from a results file, or say "
                          "it in words):\n" + "\n".join(problems))
