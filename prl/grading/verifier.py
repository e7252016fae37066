"""Answer verification with Math-Verify, with every failure named (docs/architecture.md §Verdicts and Math-Verify).

Each (response, gold) gets one verdict:

    correct | wrong | no_answer | timeout | gold_unparsable | error

plus the extracted answer and the time it took. Math-Verify's own timeouts use SIGALRM, which
works only in a process's main thread, and its defaults fold "no answer", "timeout" and "wrong"
into one 0: here ``parse``/``verify`` run with ``raise_on_error=True`` in the main thread of
worker processes. :class:`VerifierPool` adds what Math-Verify cannot: a hard wall-clock kill
(a worker that overruns is SIGKILLed and replaced, its item scored ``timeout``), a memory cap
per worker (``RLIMIT_AS``; an item that exhausts it is scored ``error``), and a cache keyed on
(extracted answer string, normalised gold). One poisoned response costs its own verdict only.
No code path evaluates response text.

Where the verifier departs from Math-Verify alone (docs/architecture.md §Verdicts and Math-Verify,
each case tested in tests/test_verifier.py; bench/verifier_forms.py measures them on the 1,517
bundled golds written in equivalent forms):

- **Written as the gold**: an answer (the box's or the tag's content) that equals the gold once
  spaces and ``$`` are dropped is ``correct`` without asking Math-Verify (spaces do not count in
  TeX math; one a command needs before a letter, ``\\cdot x``, is kept). ``12:00`` and
  ``\\frac{1}{0}`` parse to ``zoo``, whose comparison raises.
- **Every comparison tried** (:func:`compare`): string readings first, a comparison that raises does
  not hide a later one that passes; ``error`` only when all raise and none passes.
- **Both sides rewritten alike** (:func:`canonical_latex`): an upright single letter (``\\mathrm{e}``)
  is the letter, a text subscript (``\\lambda_{\\text{red}}``) the plain one.
- **An answer's symbols take the gold's assumptions** when they share a name (``3+3 i`` ≡ ``3+3i``).
- **Definitions** (``x = \\text{east}``, ``f(1) = 7``): against a gold that is no equation, the value
  is read on its own where the whole did not match (:func:`_assigned_value`).
- **Passes that are not** (:func:`false_pass`): exact numbers must be equal exactly; an answer whose
  numeric sides differ (``1 = 2``) is wrong. Names (``x``, ``C(8, 2)``, ``f(2)``) are not compared.
  In an answer tag only the clause Math-Verify read is examined (:func:`clause_read`): a sentence's
  several equations are no one chain.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import re
import time
from collections import deque
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from prl.data.datasets import last_boxed
from prl.signals import sigint_blocked

VERDICTS = ("correct", "wrong", "no_answer", "timeout", "gold_unparsable", "error")


@dataclass(frozen=True)
class Verdict:
    verdict: str
    extracted: str | None
    gold: str
    ms: float
    detail: str = ""

    @property
    def score(self) -> float:
        return 1.0 if self.verdict == "correct" else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "score": self.score}


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class VerifierSettings:
    """How responses are verified: the one definition of the verifier's knobs and their defaults.

    ``EvalConfig``, ``ImportConfig``, ``TrainConfig`` and ``RescoreConfig`` include these fields
    (``prl.options.include_fields``), so ``prl eval``, ``prl import``, ``prl rescore`` and the trainer's
    YAML take the same keys and flags with the same defaults; :meth:`of` reads them back from any of them.
    """

    verifier_workers: int = 2
    """Math-Verify worker processes."""
    verify_timeout_s: int = 5
    """Math-Verify's own timeout per call (integer seconds); the hard wall-clock kill is 3× this."""

    WALL_FACTOR: ClassVar[float] = 3.0
    """A worker still busy after ``WALL_FACTOR`` × ``verify_timeout_s`` seconds is killed (``VerifierPool.wall_s``)."""

    @classmethod
    def of(cls, config: Any) -> "VerifierSettings":
        """The verifier settings of a config that includes them (or of a VerifierSettings)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})

    @property
    def wall_s(self) -> float:
        return self.WALL_FACTOR * self.verify_timeout_s

    def pool(self) -> "VerifierPool":
        """Worker processes with these settings (a context manager)."""
        return VerifierPool(self.verifier_workers, timeout_s=self.verify_timeout_s, wall_s=self.wall_s)

    def manifest(self) -> dict[str, Any]:
        """The ``verifier`` section of a run manifest: Math-Verify's version, the limits, the verdicts."""
        from importlib import metadata

        return {"math_verify": metadata.version("math-verify"), "timeout_s": self.verify_timeout_s,
                "wall_s": int(self.wall_s) if float(self.wall_s).is_integer() else self.wall_s,
                "verdicts": "|".join(VERDICTS)}


def answer_tag(response: str) -> str | None:
    """Content of the last ``<answer>…</answer>`` (the R1-Zero format), stripped; None if there is none."""
    found = _ANSWER_TAG.findall(response[-20000:])
    return found[-1].strip() if found else None


def extract_answer(response: str) -> str | None:
    """The answer a response gives, and the string the cache keys on: the last ``\\boxed{}`` content, else
    the last ``<answer>`` tag's content (a response in the R1-Zero format), else None (Math-Verify then
    reads the whole response)."""
    boxed = last_boxed(response)
    return boxed if boxed is not None else answer_tag(response)


_GOLD_CACHE_SIZE = 4096  # parsed golds a worker keeps (a benchmark has at most a few thousand)


def verify_one(response: str, gold: str, *, timeout_s: int = VerifierSettings.verify_timeout_s, gold_cache: dict | None = None) -> Verdict:
    """Verify in this process (must be a main thread: Math-Verify's timeouts use SIGALRM).

    ``gold_cache``: gold string → its parse, kept by the caller across calls (a pool worker keeps
    one). A problem's n samples share one gold, and parsing a benchmark gold is most of the cost
    of a short answer (bench/verify.py: 62%); only successful parses are kept.
    """
    from math_verify import parse
    from math_verify.errors import TimeoutException

    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int) or timeout_s < 1:
        raise ValueError(f"timeout_s: must be an integer >= 1 (Math-Verify silently ignores fractions), got {timeout_s!r}")
    t0 = time.perf_counter()
    extracted = extract_answer(response)

    def done(verdict: str, detail: str = "") -> Verdict:
        return Verdict(verdict, extracted, gold, (time.perf_counter() - t0) * 1e3, detail)

    if extracted is not None and _squash(extracted) and _squash(extracted) == _squash(gold):
        return done("correct", "the answer is written as the gold")
    gold_parsed = gold_cache.get(gold) if gold_cache is not None else None
    if gold_parsed is None:
        try:
            gold_parsed = parse("\\boxed{" + canonical_latex(gold) + "}", parsing_timeout=timeout_s, raise_on_error=True)
        except TimeoutException:
            return done("gold_unparsable", "gold parse timed out")
        except Exception as e:  # noqa: BLE001 - reported, never raised
            return done("gold_unparsable", f"{type(e).__name__}: {e}"[:300])
        if not gold_parsed:
            return done("gold_unparsable", "Math-Verify extracted nothing from the gold")
        if gold_cache is not None:
            if len(gold_cache) >= _GOLD_CACHE_SIZE:
                gold_cache.pop(next(iter(gold_cache)))  # oldest first
            gold_cache[gold] = gold_parsed
    # an <answer> tag without a box is the answer: Math-Verify alone would read the last number anywhere
    boxed = last_boxed(response) is not None
    tagged = extracted is not None and not boxed
    source = "the boxed answer" if boxed else "the answer tag's content" if tagged else \
        "the answer Math-Verify read from the response (no box, no answer tag)"
    try:
        pred = parse(canonical_latex(extracted if tagged else response), parsing_timeout=timeout_s, raise_on_error=True)
    except TimeoutException:
        return done("timeout", "answer parse timed out")
    except Exception as e:  # noqa: BLE001
        return done("error", f"{type(e).__name__}: {e}"[:300])
    if not pred:
        return done("no_answer")
    if extracted is None:
        extracted = str(pred[-1]).strip("*_ ").rstrip(".").strip("*_ ")  # "**73**." (markdown bold) → "73"
    ok, used, error, raised = False, pred, None, ""
    try:
        ok, raised = compare(gold_parsed, pred, timeout_s)
    except TimeoutException:
        return done("timeout", "verify timed out")
    except Exception as e:  # noqa: BLE001 - every comparison raised and none passed
        error = e
    value = None if ok else _assigned_value(extracted, gold)
    if value is not None:
        try:
            rhs = parse("\\boxed{" + canonical_latex(value) + "}", parsing_timeout=timeout_s, raise_on_error=True)
            if rhs and compare(gold_parsed, rhs, timeout_s)[0]:
                ok, used, error = True, rhs, None
        except TimeoutException:
            return done("timeout", "verify timed out")
        except Exception:  # noqa: BLE001 - the value alone does not match either: the whole's verdict stands
            pass
    if error is not None:
        return done("error", f"{type(error).__name__}: {error}"[:300])
    if ok:
        examined = extracted
        if tagged:  # a sentence's equations are no one chain: examine the clause Math-Verify read
            examined = clause_read(extracted, next((x for x in pred if isinstance(x, str)), None))
            if examined != extracted:
                source = "the clause of the answer tag's content that Math-Verify read"
        why = false_pass(examined, gold_parsed, used, source=source)
        if why:
            return done("wrong", why)
        return done("correct")
    return done("wrong", f"not equal as written; Math-Verify could not compare them as math ({raised})" if raised else "")


def compare(gold_parsed: list, pred: list, timeout_s: int | None) -> tuple[bool, str]:
    """Whether any (gold, answer) reading pair is equal by Math-Verify, each pair compared on its own;
    and, when none is, why some pairs could not be compared ("" when all were).

    Math-Verify's ``verify`` with ``raise_on_error=True`` stops at the first pair that raises
    (``12:00`` and ``\\frac{1}{0}`` parse to ``zoo``, whose comparison raises) and never reaches its
    string comparison; here the string pairs go first and a pair that raises does not hide a later
    one that passes. When no pair passes, the first error is raised if no pair could be compared at
    all; if some pair was compared (the strings differ), the answer is not equal and the error is
    returned for the verdict's detail. A timeout stops the comparison (the time is spent). Symbols
    of the answer named like the gold's take the gold's assumptions: Math-Verify makes every symbol
    non-real when the text has a standalone ``i`` (``3+3 i``) and real otherwise (``3+3i``), and
    sympy's real ``i`` ≠ its non-real ``i``.
    """
    from math_verify import verify

    pred = [_with_gold_symbols(p, gold_parsed) for p in pred]
    pairs = [(g, t) for g in gold_parsed for t in pred]
    pairs.sort(key=lambda gt: not (isinstance(gt[0], str) and isinstance(gt[1], str)))  # stable: strings first
    error: Exception | None = None
    compared = 0
    for g, t in pairs:
        try:
            if verify([g], [t], timeout_seconds=timeout_s, raise_on_error=True):
                return True, ""
            compared += isinstance(g, str) == isinstance(t, str)  # a string against an expression is no comparison
        except Exception as e:  # noqa: BLE001 - TimeoutException (BaseException) propagates
            error = error or e
    if error is not None and not compared:
        raise error
    return False, "" if error is None else f"{type(error).__name__}: {error}"[:300]


def _with_gold_symbols(expr, gold_parsed: list):
    import sympy

    if isinstance(expr, str) or not isinstance(expr, sympy.Basic):
        return expr
    by_name = {}
    for g in gold_parsed:
        if isinstance(g, sympy.Basic):
            for s in g.free_symbols:
                by_name.setdefault(s.name, s)
    swap = {s: by_name[s.name] for s in expr.free_symbols if s.name in by_name and by_name[s.name] != s}
    return expr.xreplace(swap) if swap else expr


def _squash(s: str) -> str:
    """``s`` without its spaces, except one a command needs before a letter (``\\cdot x``), and without ``$``."""
    return _SPACES.sub(lambda m: m.group(1) + " " if m.group(1) else "", s.replace("$", "").strip())


_SPACES = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])|\s+")


_UPRIGHT_LETTER = re.compile(r"\\(?:mathrm|text|textrm|operatorname|mbox)\s*\{([A-Za-z])\}|\{\\rm\s+([A-Za-z])\}")
_TEXT_SUBSCRIPT = re.compile(r"_\s*\{\s*\\(?:mathrm|text|textrm|mbox)\s*\{([A-Za-z0-9 ]*)\}\s*\}")


def canonical_latex(text: str) -> str:
    """What the verifier rewrites in golds and responses before Math-Verify reads them (both sides alike).

    - An upright single letter (``\\mathrm{e}``, ``\\text{i}``, ``\\operatorname{d}``, ``{\\rm e}``) is the
      letter: Math-Verify turns ``\\mathrm{…}`` into ``\\text{…}``, reads ``\\text{e}`` as a variable e, not
      Euler's number, and its unit stripping cuts ``\\text{e}}`` off the end of a formula, so the gold
      ``1 - \\frac{1}{\\mathrm{e}}`` parsed to the fragment ``1 - \\frac{1}{``.
    - A text subscript (``\\lambda_{\\text{red}}``) is the plain subscript (``\\lambda_{red}``).
    """
    if "\\" not in text:
        return text
    text = _UPRIGHT_LETTER.sub(lambda m: m.group(1) or m.group(2), text)
    return _TEXT_SUBSCRIPT.sub(lambda m: "_{" + m.group(1).replace(" ", "") + "}", text)


_NAME = re.compile(r"\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9\\]+\}?)?(?:\s*\([^()=]*\))?\s*")


def _assigned_value(extracted: str | None, gold: str) -> str | None:
    """The value of an answer written as a definition, ``name = value`` (``x = \\text{east}``, ``f(1) = 7``), when
    the gold is not itself an equation; else None. Math-Verify reads ``x = 5`` as 5 but its unit stripping
    cuts a value that looks like a unit or ends in ``\\text{…}`` (``x = m`` → ``x =``), so the value is read
    on its own where the whole did not match."""
    if not extracted or "=" not in extracted or len(_top_level_sides(gold)) > 1:
        return None
    sides = _top_level_sides(extracted)
    if len(sides) != 2 or not sides[1].strip() or not _NAME.fullmatch(sides[0]):
        return None
    return sides[1].strip()


# ─── passes Math-Verify gives that are not (fixed in our layer) ─────────────────────────────

_CLAUSE_BREAK = re.compile(r"\$|\\[()\[\]]|[,;:\n∴]|\.(?=\s|$)")


def clause_read(content: str, read: str | None) -> str:
    """The part of an answer tag's ``content`` that Math-Verify's reading ``read`` (the string it parsed) came
    from, for the unequal-sides rule: ``read`` itself when it holds an equation (a LaTeX chain read whole,
    ``$1 = 2$``); else the clause around its last occurrence, between the nearest math delimiters or clause
    marks (``, ; : ∴``, a full stop, a line break) outside brackets (``1 = 2`` read as ``2``: the chain is the
    clause). A prose tag such as ``10×15=150, 150×24=3600, ∴ the square root of 3600 is 60.`` is then not
    split at every ``=`` into sides of different equations (``150, 150×24`` against ``3600, ∴ … 60.``)."""
    if not read:
        return content
    if "=" in read:
        return read
    at = content.rfind(read)
    if at < 0:
        return content
    depth, breaks, i = 0, [], 0  # breaks: (start, end) of each delimiter or clause mark outside brackets
    while i < len(content):
        m = _CLAUSE_BREAK.match(content, i)
        if m and (depth == 0 or m.group().startswith(("$", "\\"))):
            breaks.append(m.span())
            i = m.end()
            continue
        if content[i] in "{([":
            depth += 1
        elif content[i] in "})]":
            depth = max(depth - 1, 0)
        i += 1
    start = max((e for b, e in breaks if e <= at), default=0)
    end = min((b for b, e in breaks if b >= at + len(read)), default=len(content))
    return content[start:end].strip()


_HUGE = 10_000  # factorial arguments and integer exponents above this are not evaluated exactly


def _exact_number(expr):
    """The exact rational value of a parsed answer without symbols or decimals, else None."""
    import sympy

    if not isinstance(expr, sympy.Basic) or expr.free_symbols:
        return None
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Float):
            return None  # a decimal answer is compared with Math-Verify's tolerance, as intended
        if isinstance(node, sympy.factorial) and not (node.args[0].is_Integer and node.args[0] <= _HUGE):
            return None
        if isinstance(node, sympy.Pow) and node.exp.is_Integer and abs(node.exp) > _HUGE:
            return None
    value = expr.doit()
    return value if isinstance(value, sympy.Rational) else None


def _top_level_sides(answer: str) -> list[str]:
    sides, depth, start = [], 0, 0
    for i, ch in enumerate(answer):
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif ch == "=" and depth == 0 and answer[i - 1:i] not in ("<", ">", "!", "\\"):
            sides.append(answer[start:i])
            start = i + 1
    return sides + [answer[start:]]


def false_pass(extracted: str | None, gold_parsed: list, pred: list, *, source: str = "the boxed answer") -> str:
    """Why a pass Math-Verify gave is not one ("" when it stands). Two cases, both measured:

    - **Numeric tolerance between exact numbers** (Math-Verify issue #14): it compares numbers to 6
      decimals, so ``1/2006!`` equals ``1/2004!``. Where both sides are exact rationals (no decimals,
      no symbols) they must be equal exactly; Math-Verify's percent reading (50 ≡ 50%) is kept.
    - **Unequal sides** (``\\boxed{x = 1 = 2}`` and ``\\boxed{1 = 2}`` pass against 2: it reads the
      last side): an answer equation whose numeric sides are not all equal answers nothing. The
      rule examines the answer as given — the box's content, else the ``<answer>`` tag's, else the
      string Math-Verify read from the response — and ``source`` names which in the detail. A side
      with a variable (``x``) or an undefined function (``C(8, 2)``, ``f(2)``: a name applied to
      numbers is no number) is a name for the value, not a value, and is not compared.
    """
    import sympy
    from math_verify import parse, verify
    from sympy.core.function import AppliedUndef

    g = next((x for x in gold_parsed if not isinstance(x, str)), None)
    p = next((x for x in pred if not isinstance(x, str)), None)
    try:
        gv, pv = _exact_number(g), _exact_number(p)
    except Exception:  # noqa: BLE001 - an expression sympy cannot evaluate exactly: Math-Verify's verdict stands
        gv = pv = None
    if gv is not None and pv is not None and gv != pv and gv != 100 * pv and pv != 100 * gv:
        return (f"Math-Verify's numeric tolerance equated two different exact numbers ({extracted} vs the gold); "
                "scored wrong (Math-Verify issue #14)")
    if extracted and "=" in extracted:
        sides = [parse("\\boxed{" + canonical_latex(side) + "}") for side in _top_level_sides(extracted) if side.strip()]
        values = [sp for sp in sides if sp and isinstance(sp[0], sympy.Basic) and not sp[0].free_symbols
                  and not sp[0].atoms(AppliedUndef)]
        for a, b in zip(values, values[1:]):
            if not verify(a, b):
                return (f"{source} {extracted!r} is a chain of unequal sides; Math-Verify reads only its "
                        "last side; scored wrong")
    return ""


# ─── the pool ───────────────────────────────────────────────────────────────────────────────

_WARM_UP = ("\\boxed{\\frac{1}{2}}", "0.5")
"""A pair a worker verifies before it reports ready: it loads what its first real item would
(Math-Verify's parser, sympy, the comparison), so that cost is start-up, not the item's."""


def _worker(conn, timeout_s: int, memory_mb: int) -> None:
    try:
        import math_verify  # noqa: F401 - import (~1 s) while the parent prepares the batch

        verify_one(*_WARM_UP, timeout_s=timeout_s)
    except BaseException as e:  # noqa: BLE001 - the parent must learn why
        conn.send(("failed", f"{type(e).__name__}: {e}"[:300]))
        return
    if memory_mb:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send(("ready", ""))  # the parent starts an item's clock from here (VerifierPool.verify)
    gold_cache: dict = {}
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        response, gold = item
        try:
            v = verify_one(response, gold, timeout_s=timeout_s, gold_cache=gold_cache)
        except MemoryError:
            v = Verdict("error", None, gold, 0.0, "MemoryError: worker memory cap reached")
        except BaseException as e:  # noqa: BLE001 - the worker must answer
            v = Verdict("error", None, gold, 0.0, f"{type(e).__name__}: {e}"[:300])
        conn.send(v)


class _GoldQueue:
    """Items waiting for a worker, grouped by gold: a free worker keeps to the gold it parsed last
    (its gold cache then parses each gold once), or starts a gold no other worker is on."""

    def __init__(self, items: list[int], pairs: list[tuple[str, str]], workers: int):
        self._by_gold: dict[str, deque[int]] = {}
        for i in items:
            self._by_gold.setdefault(pairs[i][1], deque()).append(i)
        self._on: list[str | None] = [None] * workers

    def __bool__(self) -> bool:
        return bool(self._by_gold)

    def pop(self, worker: int) -> int:
        gold = self._on[worker]
        if gold not in self._by_gold:
            others = set(self._on[:worker] + self._on[worker + 1:])
            gold = next((g for g in self._by_gold if g not in others), next(iter(self._by_gold)))
            self._on[worker] = gold
        items = self._by_gold[gold]
        i = items.popleft()
        if not items:
            del self._by_gold[gold]
        return i


class VerifierPool:
    """Worker processes verifying (response, gold) pairs with hard limits and a cache.

    ``wall_s``: a worker still busy after this many seconds is killed and replaced, and the item
    is scored ``timeout``. ``memory_mb``: address-space cap per worker (0 = none).

    An item's clock starts once its worker is ready: a worker (a first one, or one replacing a
    killed one) imports Math-Verify and verifies a warm-up pair before it says so, and that start-up
    counts against no item. A worker whose start-up raises (Math-Verify missing or broken), or that
    is not ready ``start_s`` seconds after it was started, raises ``RuntimeError``: no verdict would
    be true. One that dies (killed) costs the item it was given, as a worker dying on an item does.
    """

    def __init__(self, workers: int = VerifierSettings.verifier_workers, *,
                 timeout_s: int = VerifierSettings.verify_timeout_s, wall_s: float | None = None,
                 memory_mb: int = 2048, cache: bool = True, start_s: float = 120.0):
        if workers < 1:
            raise ValueError(f"workers: must be >= 1, got {workers}")
        wall_s = VerifierSettings.WALL_FACTOR * timeout_s if wall_s is None else wall_s
        self.timeout_s, self.wall_s, self.memory_mb, self.start_s = timeout_s, wall_s, memory_mb, start_s
        self._ctx = mp.get_context("spawn")
        self._born: dict[int, float] = {}  # worker pid -> when it was started
        self._ready: set[int] = set()  # pids of the workers that said ready (read from their pipes)
        self._workers = [self._spawn() for _ in range(workers)]
        self._cache: dict[tuple[str, str], Verdict] | None = {} if cache else None
        self.stats = {"items": 0, "cache_hits": 0, "killed": 0}

    def _spawn(self):
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child, self.timeout_s, self.memory_mb), daemon=True)
        with sigint_blocked(multiprocessing=True):  # a terminal's Ctrl-C is the command's: close() stops the workers
            proc.start()
        child.close()
        self._born[proc.pid] = time.monotonic()
        return [proc, parent]

    def _started(self, pid: int, message) -> None:
        """A worker's first message: ``("ready", "")``, or ``("failed", why)`` raised here."""
        if message != ("ready", ""):
            why = message[1] if isinstance(message, tuple) and message[:1] == ("failed",) else repr(message)[:300]
            raise RuntimeError(f"verifier worker could not start: {why}")
        self._ready.add(pid)

    def _replace(self, i: int) -> None:
        proc, conn = self._workers[i]
        proc.kill()
        proc.join(5)
        conn.close()
        self._born.pop(proc.pid, None)
        self._ready.discard(proc.pid)
        self._workers[i] = self._spawn()

    def verify(self, pairs: list[tuple[str, str]], progress=None) -> list[Verdict]:
        """Verdicts for ``pairs`` of (response, gold), in order."""
        from multiprocessing.connection import wait

        results: list[Verdict | None] = [None] * len(pairs)
        todo: list[int] = []
        keys: dict[int, tuple[str, str] | None] = {}
        pending_by_key: dict[tuple[str, str], list[int]] = {}
        for i, (response, gold) in enumerate(pairs):
            self.stats["items"] += 1
            ext = extract_answer(response)
            key = (ext, gold) if (ext is not None and self._cache is not None) else None
            keys[i] = key
            if key is not None and key in self._cache:
                hit = self._cache[key]
                results[i] = Verdict(hit.verdict, hit.extracted, hit.gold, 0.0, hit.detail)
                self.stats["cache_hits"] += 1
                continue
            if key is not None and key in pending_by_key:
                pending_by_key[key].append(i)  # same answer already queued: reuse its verdict
                self.stats["cache_hits"] += 1
                continue
            if key is not None:
                pending_by_key[key] = [i]
            todo.append(i)
        busy: dict[int, tuple[int, float | None]] = {}  # worker -> (item, started; None until the worker is ready)
        queue = _GoldQueue(todo, pairs, len(self._workers))
        done_count = 0
        while queue or busy:
            for w in range(len(self._workers)):
                if w not in busy and queue:
                    i = queue.pop(w)
                    try:
                        self._workers[w][1].send(pairs[i])
                    except (BrokenPipeError, ConnectionResetError, OSError):  # died while idle: replace, resend
                        self._replace(w)
                        self._workers[w][1].send(pairs[i])
                    busy[w] = (i, time.monotonic() if self._workers[w][0].pid in self._ready else None)
            conns = {self._workers[w][1]: w for w in busy}
            ready = wait(list(conns), timeout=0.2)
            now = time.monotonic()
            for conn in ready:
                w = conns[conn]
                i, started = busy[w]
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # the worker died (e.g. killed by the kernel), in its start-up or not
                    self._replace(w)
                    message = Verdict("error", extract_answer(pairs[i][0]), pairs[i][1], 0.0, "verifier worker died")
                else:
                    if started is None:  # the worker's start-up ended: the item it holds starts now
                        self._started(self._workers[w][0].pid, message)
                        busy[w] = (i, now)
                        continue
                busy.pop(w)
                self._finish(i, message, results, keys, pending_by_key)
                done_count += 1
            for w, (i, started) in list(busy.items()):
                if started is None:
                    if now - self._born[self._workers[w][0].pid] > self.start_s:
                        raise RuntimeError(f"verifier worker not ready {self.start_s:.0f} s after it was started "
                                           "(importing Math-Verify and verifying a warm-up pair)")
                    continue
                if now - started > self.wall_s:
                    busy.pop(w)
                    self._replace(w)
                    self.stats["killed"] += 1
                    v = Verdict("timeout", extract_answer(pairs[i][0]), pairs[i][1], (now - started) * 1e3,
                                f"killed after {self.wall_s:.0f} s wall clock")
                    self._finish(i, v, results, keys, pending_by_key)
                    done_count += 1
            if progress is not None:
                progress(done_count, len(todo))
        return results  # type: ignore[return-value]

    def _finish(self, i, v, results, keys, pending_by_key) -> None:
        key = keys[i]
        if key is None:
            results[i] = v
            return
        if self._cache is not None and v.verdict in ("correct", "wrong", "no_answer", "gold_unparsable"):
            self._cache[key] = v  # timeouts and errors are not cached: they may pass on a retry
        for j in pending_by_key.pop(key, [i]):
            results[j] = v

    def close(self, now: bool = False) -> None:
        """Stop the workers: each finishes its item and exits; ``now`` (after a Ctrl-C): killed at once."""
        for proc, conn in self._workers:
            try:
                proc.kill() if now else conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for proc, conn in self._workers:
            proc.join(2)
            if proc.is_alive():
                proc.kill()
            conn.close()
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(now=exc_type is KeyboardInterrupt)


def is_correct(response: str, gold: str, *, timeout_s: int = VerifierSettings.verify_timeout_s) -> bool:
    """True when the response's final answer equals ``gold`` by Math-Verify, in this process.

    A shorthand for quick checks (the SFT report); batches of model outputs go through
    :class:`VerifierPool` (hard wall-clock and memory limits, cache)."""
    return verify_one(response, gold, timeout_s=timeout_s).verdict == "correct"


EQUIVALENCE_MAX_CHARS = 64
"""Extracted answers longer than this are compared as strings only by :func:`equivalent_answers`."""


@functools.lru_cache(maxsize=65536)
def equivalent_answers(a: str, b: str) -> bool:
    """Whether two extracted answers are the same mathematical object (Math-Verify), for maj@n.

    Runs in any thread (no SIGALRM timeout): the cost is bounded by comparing only short answers
    (≤ :data:`EQUIVALENCE_MAX_CHARS` characters, no ``^`` tower) mathematically; longer ones, and
    any answer Math-Verify cannot parse, are equal only as identical strings. Cached."""
    if a == b or (_squash(a) and _squash(a) == _squash(b)):
        return True
    if max(len(a), len(b)) > EQUIVALENCE_MAX_CHARS or a.count("^") + b.count("^") > 2:
        return False
    from math_verify import parse

    try:
        pa = parse("\\boxed{" + canonical_latex(a) + "}", parsing_timeout=None)
        pb = parse("\\boxed{" + canonical_latex(b) + "}", parsing_timeout=None)
        return bool(pa and pb and compare(pb, pa, None)[0])
    except Exception:  # noqa: BLE001 - unparsable: not equivalent
        return False


class _NoTimeoutWarning(logging.Filter):
    """Drops Math-Verify's "Timeout is disabled" warning: only :func:`equivalent_answers` disables the
    timeouts, by design (its bound is the answer length)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutWarning())
