"""Problem relevance of a response: the signal behind "suspicious passes" (paper, Appendix C).

A verifier checks only the final answer. Appendix C shows responses that pass while their
reasoning is about a different problem, and responses that give nothing but an answer. Two
measurable per-sample signals keep that apart from correctness:

``relevance`` — content-term recall of the problem in the reasoning:

    relevance = |terms(problem) ∩ terms(reasoning)| / |terms(problem)|

* ``reasoning`` is the response without its final answer — the last ``\\boxed{…}``, else the last
  ``<answer>…</answer>`` tag (the R1-Zero format), the answer the verifier reads
  (``prl.grading.verifier.extract_answer``) — and without markup tags (``</think>``, ``<br>``): the
  answer itself must not count as referring to the problem.
* ``terms(text)``: numbers (``27``, ``27.0`` and ``027`` are the same term) and lower-cased
  words of three or more letters that are not English function words; LaTeX command names
  (``\\frac``) and single-letter variables are ignored (too generic to show relevance).
* ``None`` when the problem has no content terms. Range [0, 1]: 1 = every number and content
  word of the problem reappears in the reasoning.

``answer_only`` — the reasoning has fewer than :data:`ANSWER_ONLY_MAX_WORDS` word tokens
(e.g. "The answer is \\boxed{5}").

``best_fit`` — the problem of the same benchmark the reasoning fits best: the one asked, unless
another fits it clearly better (None where no benchmark index was at hand). The Appendix-C case, where
the reasoning solves another problem and ends on a number that happens to be this one's gold. Each
problem of the benchmark is scored by how much of it the reasoning restates:

    fit(problem, reasoning) = Σ idf(g) over the problem's token n-grams g found in the reasoning
                              / (Σ idf(g) over the problem's n-grams) ** FIT_NORM

with n-grams of 1..:data:`FIT_NGRAM` tokens, idf over the benchmark's problems. Tokens are the words
and numbers of the text with its math notation made plain (:func:`plain_math`): ``\\sec x``,
``sec x`` and ``sec(x)`` are the same tokens, ``\\frac{2\\pi}{15}`` and ``2π/15`` too, so a reasoning
that writes the problem out in words still restates it; symbols and n-grams made only of function
words ("to each other", "the value of") are not evidence. The reasoning fits another problem better
when that problem's fit exceeds the asked one's by more than a factor 1 + :data:`FIT_MARGIN`.
Problems that share one context (OlympiadBench's multi-part problems) never count against each
other: a tie between them is not evidence of a swap.

A sample is a *suspicious pass* when its verdict is ``correct`` and one of :data:`SUSPICION_RULES`
holds (:func:`flagged_by` names which; the store's ``suspicious_passes`` view applies the same rules
and lists them in its ``flagged_by`` column): it is answer-only, or its reasoning fits another problem
better (``best_fit`` is not the asked problem), or — only where ``best_fit`` was not computed (stores
written before it existed) — its relevance is below :data:`SUSPICIOUS_BELOW`. The relevance
threshold is not applied where the fit is known: on the held-out halves it added false flags (2.4% of
MATH-500's own solutions) and almost no swapped case the fit missed.

Calibrated by ``python bench/relevance.py`` on the benchmarks' own reference solutions and on swapped
cases (each problem given the reference solution of another problem with the same gold answer),
tuned on one half of the pairs and reported on the other, and by ``python bench/suspicious.py`` on
real models' correct responses imported from other tools (tests/data/external), every flagged case
read (figures in bench/RESULTS.md). It is a screen for reading, not a verdict: a terse but correct
derivation can still be flagged, and a response can quote the problem and still reason wrongly. The
Failures page's case view puts a flagged response beside both problems and keeps a researcher's
judgement of it (:data:`JUDGEMENTS`, the store's ``judgements`` table).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from prl.data.datasets import DATASETS, Problem, last_boxed, load_dataset

SUSPICIOUS_BELOW = 0.15
"""Relevance below which a correct sample is listed as a suspicious pass (also in sql/schema.sql)."""

ANSWER_ONLY_MAX_WORDS = 6
"""A reasoning part with fewer word tokens than this is "answer only"."""

FIT_NGRAM = 3
"""Longest token n-gram compared between a problem and a reasoning."""

FIT_NORM = 0.7
"""Exponent of a problem's own n-gram mass in the fit's denominator (0: raw overlap, 1: recall)."""

FIT_MARGIN = 2.5
"""Another problem must fit more than (1 + this) times better than the asked one to be flagged (tuned on half A
of bench/relevance.py's pairs: the smallest margin that flags <= 3% of the reference solutions there)."""


@dataclass(frozen=True)
class SuspicionRule:
    """One rule that lists a correct sample as a suspicious pass: its name (the ``flagged_by`` value of the
    store's ``suspicious_passes`` view) and what it says, in words, with its threshold."""

    name: str
    says: str


SUSPICION_RULES: tuple[SuspicionRule, ...] = (
    SuspicionRule("answer_only", f"the response is only an answer: fewer than {ANSWER_ONLY_MAX_WORDS} words "
                                 "besides its final answer"),
    SuspicionRule("fits_another", "its reasoning fits another problem of the same benchmark more than "
                                  f"{1 + FIT_MARGIN:g}× better than the problem asked (the Appendix-C case: the "
                                  "right answer, reasoning about something else)"),
    SuspicionRule("low_relevance", f"only where that fit was never computed (samples stored before it existed): "
                                   f"the reasoning uses fewer than {SUSPICIOUS_BELOW:.0%} of the problem's "
                                   f"numbers and content words (relevance < {SUSPICIOUS_BELOW})"),
)
"""Every rule of a suspicious pass, in the order :func:`flagged_by` reports them; the Failures page's caption and
``prl report`` state them from here, the ``suspicious_passes`` view restates them (tests/test_concepts.py)."""

RULE_NAMES = tuple(r.name for r in SUSPICION_RULES)

JUDGEMENT_SAYS = {"not_suspicious": "not suspicious: the reasoning is about the problem asked (a false flag)",
                  "confirmed": "confirmed: the Appendix-C case, or no reasoning at all"}
"""A researcher's reading of a flagged case, in words (the Failures page's choices, bench/suspicious.py's readings)."""

JUDGEMENTS = tuple(JUDGEMENT_SAYS)
"""The values of the store's ``judgements.judgement`` (its CHECK, tied by tests/test_concepts.py)."""

_STOPWORDS = frozenset("""
the and for are but not you all any can had her was one our out has him his how its may new now
old see two way who did get let put say she too use that with have this will your from they been
than them then were what when which while would there their these those into such only also each
some more most other over same very just find what where does many much both like make made given
let's lets think step output final answer within boxed value number numbers following compute
determine calculate show prove suppose assume express simplest form
""".split())

_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_WORD = re.compile(r"[A-Za-z]{3,}")
_WORD_TOKEN = re.compile(r"[A-Za-z0-9]+")


def _norm_number(s: str) -> str:
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s.lstrip("0") or "0"


def terms(text: str) -> set[str]:
    """The content terms of ``text`` (see the module docstring)."""
    text = _LATEX_CMD.sub(" ", text)
    nums = {_norm_number(m) for m in _NUMBER.findall(text)}
    words = {w.lower() for w in _WORD.findall(text)} - _STOPWORDS
    return nums | words


_MARKUP = re.compile(r"</?[A-Za-z][A-Za-z0-9]*\s*/?>")


def reasoning_part(response: str) -> str:
    """The response without its final answer (its last ``\\boxed{…}``, else its last ``<answer>…</answer>``) and
    without markup tags (``</think>``, ``<br>``)."""
    boxed = last_boxed(response)
    if boxed is not None:
        cut = response.rfind(boxed)
        start = response.rfind("\\", 0, cut)
        if start >= 0:
            response = response[:start] + response[cut + len(boxed) + 1:]
    else:
        end = response.rfind("</answer>")
        start = response.rfind("<answer>", 0, end) if end >= 0 else -1
        if start >= 0:
            response = response[:start] + response[end + len("</answer>"):]
    return _MARKUP.sub(" ", response) if "<" in response else response


def relevance(problem: str, response: str) -> float | None:
    """Share of the problem's content terms that the reasoning uses, in [0, 1]; None if it has none."""
    wanted = terms(problem)
    if not wanted:
        return None
    return len(wanted & terms(reasoning_part(response))) / len(wanted)


def answer_only(response: str) -> bool:
    """Whether the response is (almost) nothing but its final answer."""
    return len(_WORD_TOKEN.findall(_LATEX_CMD.sub(" ", reasoning_part(response)))) < ANSWER_ONLY_MAX_WORDS


def flagged_by(verdict: str, rel: float | None, only_answer: bool | None, best_fit: str | None = None,
               problem_id: str | None = None) -> tuple[str, ...]:
    """The names of the :data:`SUSPICION_RULES` that list this sample (empty: not a suspicious pass).

    ``rel``: its relevance; ``only_answer``: :func:`answer_only`; ``best_fit``: the problem the reasoning fits
    best (:meth:`FitIndex.best_fit`), None if not computed; ``problem_id``: the problem asked.
    """
    if verdict != "correct":
        return ()
    hits = []
    if only_answer:
        hits.append("answer_only")
    if best_fit is not None and best_fit != problem_id:
        hits.append("fits_another")
    if best_fit is None and rel is not None and rel < SUSPICIOUS_BELOW:
        hits.append("low_relevance")
    return tuple(hits)


def is_suspicious_pass(verdict: str, rel: float | None, only_answer: bool | None, best_fit: str | None = None,
                       problem_id: str | None = None) -> bool:
    """Whether the store's ``suspicious_passes`` view lists the sample, for code that has not stored it
    (:func:`flagged_by` says which rules)."""
    return bool(flagged_by(verdict, rel, only_answer, best_fit, problem_id))


def rules_text() -> str:
    """Every rule in one sentence, for captions and reports."""
    return "; or ".join(r.says for r in SUSPICION_RULES)


# ─── fits another problem better ────────────────────────────────────────────────────────────

_LATEX_LAYOUT = frozenset("""
left right big bigg bigl bigr biggl biggr middle displaystyle textstyle scriptstyle mathbf mathrm mathit mathbb
mathcal mathsf mathtt boldsymbol bm text textbf textit textrm mbox operatorname frac dfrac tfrac cfrac begin end
quad qquad hspace vspace phantom limits nolimits substack overline underline hat bar vec tilde
""".split())
"""LaTeX commands that are layout, not content: dropped (``\\frac{2\\pi}{15}`` reads as ``2 pi 15``)."""

_UNICODE_MATH = {"π": " pi ", "°": " circ ", "²": "^2", "³": "^3", "√": " sqrt ", "×": " times ", "·": " cdot ",
                 "−": "-", "≤": " le ", "≥": " ge ", "≠": " ne ", "∞": " infty ", "θ": " theta ", "α": " alpha ",
                 "β": " beta ", "∠": " angle ", "△": " triangle "}
_SYNONYMS = {"degrees": "circ", "degree": "circ", "leq": "le", "geq": "ge", "neq": "ne"}
_FIT_STOP = _STOPWORDS | frozenset("a an is of to be on in at by as or if it we so i are do no us".split())
_LATEX_NAME = re.compile(r"\\([A-Za-z]+)")
_FIT_TOKEN = re.compile(r"[a-z]+|\d+(?:\.\d+)?")


def plain_math(text: str) -> str:
    """``text`` lower-cased with its math notation made plain: LaTeX commands by their names (``\\sin`` → ``sin``),
    layout commands (``\\frac``, ``\\left``, ``\\mathbf``) dropped, math symbols by names (``π`` → ``pi``)."""
    for sym, name in _UNICODE_MATH.items():
        if sym in text:
            text = text.replace(sym, name)
    text = _LATEX_NAME.sub(lambda m: " " if m.group(1) in _LATEX_LAYOUT else f" {m.group(1)} ", text)
    return text.lower()


def fit_tokens(text: str) -> list[str]:
    """The words and numbers of :func:`plain_math` ``(text)``, in order (synonyms such as "degrees" and ``°``
    made one)."""
    return [_SYNONYMS.get(t, t) for t in _FIT_TOKEN.findall(plain_math(text))]


def fit_grams(text: str) -> set[str]:
    """Token n-grams (1..FIT_NGRAM) of ``text`` (:func:`fit_tokens`), without those made only of function words."""
    toks = fit_tokens(text)
    stop = [t in _FIT_STOP for t in toks]
    return {" ".join(toks[k:k + n]) for n in range(1, FIT_NGRAM + 1) for k in range(len(toks) - n + 1)
            if not all(stop[k:k + n])}


class FitIndex:
    """The problems of one benchmark, for asking which of them a reasoning fits best."""

    def __init__(self, problems: Sequence[Problem]):
        self.ids = [p.problem_id for p in problems]
        self._pos = {pid: i for i, pid in enumerate(self.ids)}
        self._problems = list(problems)
        self._context = [p.meta.get("context") if isinstance(p.meta, dict) else None for p in problems]
        grams = [fit_grams(p.problem) for p in problems]
        df: dict[str, int] = defaultdict(int)
        for g in grams:
            for x in g:
                df[x] += 1
        n = len(problems)
        self._idf = {x: math.log((n + 1) / (c + 0.5)) for x, c in df.items()}
        self._norm = [max(sum(self._idf[x] for x in g), 1e-9) ** FIT_NORM for g in grams]
        self._posting: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(grams):
            for x in g:
                self._posting[x].append(i)

    def fits(self, response: str) -> dict[str, float]:
        """{problem id: fit} of the response's reasoning, for the problems it shares any n-gram with."""
        acc: dict[int, float] = defaultdict(float)
        for x in fit_grams(reasoning_part(response)):
            w = self._idf.get(x)
            if w is not None:
                for i in self._posting[x]:
                    acc[i] += w
        return {self.ids[i]: v / self._norm[i] for i, v in acc.items()}

    def problem(self, problem_id: str) -> Problem | None:
        """The indexed problem ``problem_id`` (its text and gold), None if it is not in the index."""
        i = self._pos.get(problem_id)
        return None if i is None else self._problems[i]

    def fit_case(self, problem_id: str, response: str, margin: float = FIT_MARGIN) -> FitCase | None:
        """The fit of the reasoning to ``problem_id`` and to its best rival (the other problem it fits best, parts
        of the same context excluded), and which of them it fits best; None if ``problem_id`` is not indexed."""
        asked = self._pos.get(problem_id)
        if asked is None:
            return None
        scores = self.fits(response)
        own = scores.get(problem_id, 0.0)
        context = self._context[asked]
        best_id, best = None, 0.0
        for pid, v in scores.items():
            j = self._pos[pid]
            if j == asked or (context is not None and self._context[j] == context):
                continue
            if v > best:
                best_id, best = pid, v
        return FitCase(problem_id, own, best_id, best, margin,
                       best_id if best_id is not None and best > own * (1.0 + margin) else problem_id)

    def best_fit(self, problem_id: str, response: str, margin: float = FIT_MARGIN) -> str | None:
        """The problem the reasoning fits best: another one if it fits more than (1 + FIT_MARGIN) times better
        than ``problem_id``, else ``problem_id`` itself; None if ``problem_id`` is not in the index."""
        case = self.fit_case(problem_id, response, margin)
        return None if case is None else case.best_fit


@dataclass(frozen=True)
class FitCase:
    """What :meth:`FitIndex.fit_case` found for one response: the fits behind its ``best_fit``."""

    asked: str
    own_fit: float
    """fit(asked problem, reasoning)"""
    rival: str | None
    """the other problem of the benchmark the reasoning fits best (None: it shares nothing with any other)"""
    rival_fit: float
    margin: float
    best_fit: str
    """``rival`` if ``rival_fit > own_fit * (1 + margin)``, else ``asked``"""

    @property
    def ratio(self) -> float | None:
        """rival_fit / own_fit (None where the reasoning shares nothing with the asked problem)."""
        return self.rival_fit / self.own_fit if self.own_fit > 0 else None


_USER_INDEXES: dict[str, FitIndex] = {}


def register_fit_index(dataset: str, problems: Sequence[Problem]) -> None:
    """Index a user data set's problems under its name (the loader of a user file calls this)."""
    _USER_INDEXES[dataset] = FitIndex(problems)


@lru_cache(maxsize=8)
def _bundled_index(dataset: str) -> FitIndex:
    problems, _ = load_dataset(dataset, flag_raw_only=False)  # the golds' Math-Verify flags are not needed here (~7 s)
    return FitIndex(problems)


def fit_index(dataset: str) -> FitIndex | None:
    """The :class:`FitIndex` of a bundled benchmark, the synthetic set or a registered user data set, else None."""
    if dataset in DATASETS:
        return _bundled_index(dataset)
    return _USER_INDEXES.get(dataset)


def best_fit(problem: Problem, response: str, index: FitIndex | None = None) -> str | None:
    """:meth:`FitIndex.best_fit` for a problem of a known benchmark (``index`` for any other)."""
    index = index if index is not None else fit_index(problem.dataset)
    return index.best_fit(problem.problem_id, response) if index is not None else None


def graded_fields(problem: Problem, response: str, verdict, index: FitIndex | None = None) -> dict:
    """The store columns a verified response gets, whoever made it (an evaluation, an import, a rescore):
    the verdict's fields, ``relevance``, ``answer_only`` and, for correct samples, ``best_fit``.
    ``verdict``: a :class:`prl.grading.verifier.Verdict`; ``index``: the data set's fit index where it is
    not a known benchmark's (see :func:`best_fit`)."""
    return {"extracted_answer": verdict.extracted, "verdict": verdict.verdict, "score": verdict.score,
            "verify_ms": round(verdict.ms, 3), "verdict_detail": verdict.detail or None,
            "relevance": relevance(problem.problem, response), "answer_only": answer_only(response),
            "best_fit": best_fit(problem, response, index) if verdict.verdict == "correct" else None}
