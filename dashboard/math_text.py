"""Math typeset, untrusted text kept text: the one home for turning a problem, a gold, an extracted
answer or a model response into the Markdown that Streamlit renders (``st.markdown``, never with
``unsafe_allow_html``). Pure functions, no Streamlit; the pages call them through
``dashboard.ui.show_text`` / ``dashboard.ui.show_answer``.

1. :func:`fragments` splits prose into text and math: ``$$…$$`` and ``\\[…\\]`` (display),
   ``$…$`` (inline, pandoc's rule: no space inside the dollars, no digit right after the closing
   one, so "$5 and $6" stays text) and ``\\(…\\)``; a ``\\begin{align}``-like environment written
   without delimiters (display); a ``\\boxed{…}`` outside math (inline).
2. :func:`katex_ok` decides, per fragment, whether KaTeX (the renderer of Streamlit's Markdown
   math) takes it without a parse error: a conservative check of macros (a whitelist), braces,
   arguments, ``\\left``/``\\right`` and environments, double scripts, ``&`` outside an alignment
   and the like. A fragment it refuses is shown as the text it was, delimiters included, so a
   whole solution never becomes one red ``ParseError``. The check is tested against the KaTeX that
   Streamlit ships on every bundled problem and gold and on the outside responses in
   ``tests/data/external`` (tests/test_dashboard.py).
3. :func:`to_markdown` writes the fragments as Markdown: math as ``$…$`` / ``$$…$$``; text with
   every ASCII punctuation character backslash-escaped (no emphasis, links, images, HTML, lists,
   headings or tables from untrusted text), ``:`` broken by a zero-width space where Streamlit's
   ``:emoji:`` / ``:color[…]`` / ``:material/…:`` shortcodes could start, line breaks kept as hard
   breaks and indentation as no-break spaces.

:func:`answer_markdown` is the same for a gold or an extracted answer, which is usually bare LaTeX
with no delimiters (``\\frac{14}{3}``): typeset whole when KaTeX takes it and it reads as a formula
rather than words, else as prose.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator

# ─── what KaTeX takes (a conservative subset of KaTeX 0.16–0.18's functions) ─────────────────

_GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa varkappa lambda mu nu xi "
          "omicron pi varpi rho varrho sigma varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda "
          "Xi Pi Sigma Upsilon Phi Psi Omega digamma")
_BINARY = ("pm mp times div cdot ast star circ bullet oplus ominus otimes oslash odot cap cup sqcap sqcup vee wedge "
           "setminus smallsetminus wr amalg uplus land lor lnot neg bigcirc diamond triangleleft triangleright lhd rhd "
           "cdotp ldotp centerdot dagger ddagger")
_RELATIONS = (
    "leq le geq ge neq ne leqslant geqslant ll gg lll ggg equiv approx approxeq sim simeq cong propto prec succ "
    "preceq succeq subset supset subseteq supseteq subsetneq supsetneq nsubseteq nsupseteq in ni notin owns mid "
    "nmid parallel nparallel perp models vdash dashv doteq asymp bowtie smile frown lt gt nless ngtr nleq ngeq "
    "lesssim gtrsim triangleq coloneqq eqqcolon coloneq to gets mapsto longmapsto "
    "rightarrow leftarrow leftrightarrow Rightarrow Leftarrow Leftrightarrow longrightarrow longleftarrow "
    "longleftrightarrow Longrightarrow Longleftarrow Longleftrightarrow uparrow downarrow Uparrow Downarrow "
    "updownarrow Updownarrow nearrow searrow nwarrow swarrow hookrightarrow hookleftarrow rightharpoonup "
    "leftharpoonup rightleftharpoons leftrightarrows rightrightarrows sqsubset sqsupset sqsubseteq sqsupseteq "
    "therefore because colon")
_ORDINARY = (
    "infty partial nabla forall exists nexists emptyset varnothing angle measuredangle sphericalangle triangle "
    "square blacksquare Box diamondsuit clubsuit spadesuit heartsuit prime backprime ell hbar hslash imath jmath "
    "aleph beth gimel Re Im wp mho checkmark degree surd top bot flat natural sharp S P copyright pounds yen "
    "bigtriangleup bigtriangledown blacktriangle lbrace rbrace lbrack rbrack langle rangle lfloor rfloor lceil "
    "rceil lvert rvert lVert rVert vert Vert backslash")
_OTHER = (
    # dots and spaces
    "dots ldots cdots vdots ddots dotsb dotsc dotsm dotsi dotso quad qquad enspace space thinspace medspace "
    "thickspace negthinspace negmedspace negthickspace "
    # named functions
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh coth arg deg det dim exp gcd hom inf ker lg lim "
    "liminf limsup ln log max min Pr sup bmod mod "
    # big operators
    "sum prod coprod int iint iiint oint bigcup bigcap bigvee bigwedge bigoplus bigotimes bigodot biguplus "
    "bigsqcup "
    # style switches (they apply to the rest of the group)
    "displaystyle textstyle scriptstyle scriptscriptstyle rm bf it sf tt cal "
    "AA iff implies impliedby vcentcolon not")
PLAIN_SYMBOLS = frozenset(" ".join((_GREEK, _BINARY, _RELATIONS, _ORDINARY)).split())
"""Argument-less symbols that may also stand alone as an argument (``x^\\pi``, ``\\frac\\pi2``)."""
SYMBOLS = PLAIN_SYMBOLS | frozenset(_OTHER.split())
"""Control words that take no argument."""

OPERATORS = frozenset("sum prod coprod int iint iiint oint bigcup bigcap bigvee bigwedge bigoplus bigotimes bigodot "
                      "biguplus bigsqcup lim liminf limsup max min sup inf det gcd Pr".split())
"""Control words after which ``\\limits`` / ``\\nolimits`` may stand."""

MATH_ARG = {**{w: 1 for w in (
    "mathrm mathbf mathbb mathcal mathfrak mathsf mathit mathtt mathscr boldsymbol bold bm Bbb mathop mathbin "
    "mathrel mathord mathopen mathclose mathpunct overline underline hat widehat bar vec tilde widetilde dot ddot "
    "check breve acute grave mathring overrightarrow overleftarrow overleftrightarrow underrightarrow "
    "underleftarrow overbrace underbrace boxed phantom hphantom vphantom cancel bcancel xcancel pmod pod "
    "operatorname substack sqrt xrightarrow xleftarrow").split()},
    **{w: 2 for w in "frac dfrac tfrac cfrac binom dbinom tbinom stackrel overset underset".split()}}
"""Control words whose arguments are math, by number of arguments."""

INFIX = frozenset({"over", "choose", "atop"})
"""Infix operators (one per group)."""

TEXT_ARG = frozenset("text textbf textit textrm textsf texttt textnormal textup emph tag".split())
"""Control words whose one argument is text."""

OPTIONAL_ARG = frozenset({"sqrt", "xrightarrow", "xleftarrow"})
"""Control words that may take ``[…]`` before their argument."""

TEXT_WORDS = frozenset("text textbf textit textrm textsf texttt textnormal textup emph quad qquad ldots dots "
                       "enspace space".split())
"""Control words allowed inside a text argument."""

SIZES = frozenset("big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr Biggl Biggr bigm Bigm biggm Biggm".split())
"""Control words followed by a delimiter."""

DELIMITER_WORDS = frozenset("langle rangle lfloor rfloor lceil rceil lvert rvert lVert rVert vert Vert uparrow "
                            "downarrow updownarrow Uparrow Downarrow Updownarrow backslash lbrace rbrace lbrack rbrack "
                            "lgroup rgroup".split())
DELIMITER_CHARS = frozenset("()[]|/.<>")
DELIMITER_SYMBOLS = frozenset({"{", "}", "|"})  # \{ \} \|

ENVIRONMENTS = frozenset("matrix pmatrix bmatrix Bmatrix vmatrix Vmatrix smallmatrix cases dcases rcases aligned "
                         "gathered array".split())
DISPLAY_ENVIRONMENTS = frozenset("align align* equation equation* gather gather* split".split())
"""Environments KaTeX takes only in display mode (they are also found without delimiters in prose)."""
COLUMN_SPEC = frozenset({"array"})
ALIGNING = frozenset(ENVIRONMENTS | DISPLAY_ENVIRONMENTS) - {"equation", "equation*"}
"""Environments in which ``&`` separates columns."""
ARRAYS = frozenset("matrix pmatrix bmatrix Bmatrix vmatrix Vmatrix smallmatrix array".split())
"""Environments in which ``\\hline`` may stand."""
SCRIPT_FUNCTIONS = frozenset({"frac", "dfrac", "tfrac"})
"""Functions KaTeX takes, with their arguments, as a script without braces (``256^\\frac{1}{2}``)."""

MATH_CONTROL_SYMBOLS = frozenset(",;:! {}|%$#&_>")
ESCAPED_CHARS = frozenset("{}|%$#&_")
"""Control symbols that are characters (the others, ``\\,`` ``\\;`` …, are spaces: no script argument)."""
TEXT_CONTROL_SYMBOLS = frozenset(",; %$#&_{}")
MATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-*/=<>()[]|.,;:!?'\"@~`")
TEXT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-*/=<>()[]|.,;:!?'\"@~`")
_SIZE = re.compile(r"\s*-?(\d+(\.\d*)?|\.\d+)\s*(pt|em|ex|mm|cm|in|mu|px|bp|pc|dd|cc|sp)\s*$")

_MAX_MATH = 20_000  # longer fragments stay text (KaTeX is fine; the page is not)


class _Refused(Exception):
    pass


@dataclass(frozen=True)
class _Tok:
    kind: str  # "word" (\name), "symbol" (\x), "char", "space", "{", "}", "^", "_", "&", "'"
    value: str


def _tokens(latex: str) -> list[_Tok]:
    out: list[_Tok] = []
    i, n = 0, len(latex)
    while i < n:
        c = latex[i]
        if c == "\\":
            if i + 1 >= n:
                raise _Refused("a lone backslash at the end")
            d = latex[i + 1]
            if d.isascii() and d.isalpha():
                j = i + 1
                while j < n and latex[j].isascii() and latex[j].isalpha():
                    j += 1
                out.append(_Tok("word", latex[i + 1:j]))
                i = j
                continue
            if d == "\\":
                out.append(_Tok("newline", "\\\\"))
            else:
                out.append(_Tok("symbol", d))
            i += 2
            continue
        if c in " \t\n\r":
            if not out or out[-1].kind != "space":
                out.append(_Tok("space", " "))
        elif c in "{}^_&'":
            out.append(_Tok(c, c))
        else:
            out.append(_Tok("char", c))
        i += 1
    return out


class _Checker:
    """A recursive-descent reading of one fragment; raises _Refused where KaTeX might not parse it."""

    def __init__(self, latex: str, display: bool):
        self.toks = _tokens(latex)
        self.i = 0
        self.display = display
        self.tagged = False

    # helpers
    def peek(self, skip_space: bool = True) -> _Tok | None:
        j = self.i
        while skip_space and j < len(self.toks) and self.toks[j].kind == "space":
            j += 1
        return self.toks[j] if j < len(self.toks) else None

    def next(self, skip_space: bool = True) -> _Tok | None:
        while skip_space and self.i < len(self.toks) and self.toks[self.i].kind == "space":
            self.i += 1
        if self.i >= len(self.toks):
            return None
        t = self.toks[self.i]
        self.i += 1
        return t

    def raw_group(self) -> str:
        """``{…}`` of plain characters, returned as text (environment names, column specs, sizes)."""
        t = self.next()
        if t is None or t.kind != "{":
            raise _Refused("expected a group")
        out = []
        while True:
            t = self.next(skip_space=False)
            if t is None:
                raise _Refused("unclosed group")
            if t.kind == "}":
                return "".join(out)
            if t.kind not in ("char", "space"):
                raise _Refused("unexpected token in a name")
            out.append(t.value)

    # the grammar
    def check(self) -> None:
        self.seq(stop=None, frame="top")
        if self.i < len(self.toks):
            raise _Refused("trailing tokens")

    def seq(self, stop: str | None, frame: str) -> None:
        """Atoms until ``stop`` ("}", "]", "right", ("end", env) or None for the end of input)."""
        sup, sub, primes = False, False, None
        last = None  # the kind of the last atom: "operator" for \limits
        infix = False  # \over, \choose, \atop: one per group
        row_start = True  # \hline only where a row starts
        while True:
            t = self.peek(skip_space=False)
            if t is None:
                if stop is not None:
                    raise _Refused(f"missing {stop}")
                return
            if t.kind == "space":
                self.i += 1
                primes = "closed" if primes else primes
                continue
            if stop == "]" and t.kind == "char" and t.value == "]":
                return
            if t.kind == "}":
                if stop == "}":
                    return
                raise _Refused("unbalanced }")
            if t.kind in ("^", "_"):
                self.i += 1
                if t.kind == "^":
                    if sup:
                        raise _Refused("double superscript")
                    sup = True
                else:
                    if sub:
                        raise _Refused("double subscript")
                    sub = True
                self.script_arg()
                continue
            if t.kind == "'":
                self.i += 1
                if sup or primes == "closed":
                    raise _Refused("a prime after a superscript")
                primes = "open"
                continue
            if t.kind == "word" and t.value in ("limits", "nolimits"):
                self.i += 1
                if last != "operator" or sup or sub:
                    raise _Refused("\\limits not after an operator")
                continue
            if t.kind == "word" and t.value == "right":
                if stop == "right":
                    return
                raise _Refused("\\right without \\left")
            if t.kind == "word" and t.value == "middle":
                if stop != "right":
                    raise _Refused("\\middle outside \\left…\\right")
                self.i += 1
                self.delimiter()
                sup, sub, primes = False, False, None
                last = "atom"
                continue
            if t.kind == "word" and t.value == "end":
                if isinstance(stop, tuple):
                    return
                raise _Refused("\\end without \\begin")
            if t.kind == "&":
                if frame not in ("aligning", "array"):
                    raise _Refused("& outside an alignment")
                row_start = False
                self.i += 1
                sup, sub, primes = False, False, None
                last = None
                continue
            if t.kind == "newline":
                self.i += 1
                self.newline_size()
                sup, sub, primes = False, False, None
                last = None
                row_start = True
                continue
            if t.kind == "word" and t.value in INFIX:
                if infix or frame in ("aligning", "array"):
                    raise _Refused("a second infix operator in a group")
                infix = True
                self.i += 1
                sup, sub, primes = True, True, None  # a script right after it would attach to the operator itself
                last = None
                continue
            if t.kind == "word" and t.value == "hline":
                if frame != "array" or not row_start:
                    raise _Refused("\\hline outside an array or inside a row")
                self.i += 1
                continue
            row_start = False
            last = self.atom()
            sup, sub, primes = False, False, None  # the script flags restart with each atom

    def newline_size(self) -> None:
        """``\\\\[2pt]``: KaTeX reads a ``[`` after ``\\\\`` as a size."""
        t = self.peek()
        if t is not None and t.kind == "char" and t.value == "[":
            self.next()
            size = []
            while True:
                t = self.next(skip_space=False)
                if t is None:
                    raise _Refused("unclosed [ after \\\\")
                if t.kind == "char" and t.value == "]":
                    break
                if t.kind not in ("char", "space"):
                    raise _Refused("a size after \\\\")
                size.append(t.value)
            if not _SIZE.match("".join(size)):
                raise _Refused("a [ after \\\\ that is not a size")

    def script_arg(self) -> None:
        """The argument of ``^`` or ``_``: KaTeX also takes ``\\frac`` with its arguments there (``256^\\frac12``)."""
        self.math_arg(script=True)

    def math_arg(self, script: bool = False) -> None:
        """One argument: a group, or a single character or argument-less symbol."""
        t = self.next()
        if t is None:
            raise _Refused("missing argument")
        if t.kind == "{":
            self.seq("}", "group")
            self.next()
        elif t.kind == "char" and (t.value in MATH_CHARS or (not t.value.isascii() and t.value.isprintable())) \
                and t.value not in ("'" if script else "[]"):
            pass
        elif t.kind == "word" and t.value in PLAIN_SYMBOLS:
            pass
        elif script and t.kind == "word" and t.value in SCRIPT_FUNCTIONS:
            self.i -= 1
            self.atom()
        elif script and t.kind == "symbol" and t.value in ESCAPED_CHARS:
            pass
        else:
            raise _Refused("an argument KaTeX may not take")

    def text_arg(self) -> None:
        t = self.next()
        if t is None or t.kind != "{":
            raise _Refused("a text argument must be a group")
        depth = 1
        while True:
            t = self.next(skip_space=False)
            if t is None:
                raise _Refused("unclosed text")
            if t.kind == "{":
                depth += 1
            elif t.kind == "}":
                depth -= 1
                if depth == 0:
                    return
            elif t.kind == "space":
                pass
            elif t.kind == "char":
                if not (t.value in TEXT_CHARS or (not t.value.isascii() and t.value.isprintable())):
                    raise _Refused("a character text mode may not take")
            elif t.kind == "word":
                if t.value not in TEXT_WORDS:
                    raise _Refused("a command text mode may not take")
            elif t.kind == "symbol":
                if t.value not in TEXT_CONTROL_SYMBOLS:
                    raise _Refused("a control symbol text mode may not take")
            elif t.kind == "'":
                pass
            else:  # ^ _ & \\
                raise _Refused("math in text mode")

    def delimiter(self) -> None:
        t = self.next()
        if t is None:
            raise _Refused("missing delimiter")
        if t.kind == "char" and t.value in DELIMITER_CHARS:
            return
        if t.kind == "word" and t.value in DELIMITER_WORDS:
            return
        if t.kind == "symbol" and t.value in DELIMITER_SYMBOLS:
            return
        raise _Refused("not a delimiter")

    def atom(self) -> str:
        t = self.next()
        kind = t.kind
        if kind == "{":
            self.seq("}", "group")
            self.next()
            return "atom"
        if kind == "char":
            v = t.value
            if v in MATH_CHARS or (not v.isascii() and v.isprintable()):
                return "atom"
            raise _Refused(f"character {v!r}")
        if kind == "symbol":
            if t.value in MATH_CONTROL_SYMBOLS:
                return "atom"
            raise _Refused(f"control symbol \\{t.value}")
        if kind != "word":
            raise _Refused(f"token {t.value!r}")
        w = t.value
        if w in SYMBOLS:
            if w == "not":
                nxt = self.peek()
                if nxt is None or nxt.kind in ("}", "^", "_", "&", "newline"):
                    raise _Refused("\\not before nothing")
            return "operator" if w in OPERATORS else "atom"
        if w in MATH_ARG:
            if w in OPTIONAL_ARG:
                nxt = self.peek()
                if nxt is not None and nxt.kind == "char" and nxt.value == "[":
                    self.next()
                    self.seq("]", "group")
                    self.next()
            for _ in range(MATH_ARG[w]):
                self.math_arg()
            return "operator" if w in ("operatorname", "mathop") else "atom"
        if w in TEXT_ARG:
            if w == "tag":
                if not self.display or self.tagged:
                    raise _Refused("\\tag outside display math, or twice")
                self.tagged = True
            self.text_arg()
            return "atom"
        if w in SIZES:
            self.delimiter()
            return "atom"
        if w == "left":
            self.delimiter()
            self.seq("right", "left")
            self.next()  # \right
            self.delimiter()
            return "atom"
        if w == "hspace":
            if not _SIZE.match(self.raw_group()):
                raise _Refused("\\hspace without a size")
            return "atom"
        if w == "begin":
            env = self.raw_group().strip()
            if env in DISPLAY_ENVIRONMENTS and not self.display:
                raise _Refused(f"{{{env}}} only in display math")
            if env not in ENVIRONMENTS and env not in DISPLAY_ENVIRONMENTS:
                raise _Refused(f"environment {env}")
            if env in COLUMN_SPEC:
                spec = self.raw_group()
                if not spec or any(c not in "lcr|: " for c in spec):
                    raise _Refused("column spec")
            self.seq(("end", env), "array" if env in ARRAYS else "aligning" if env in ALIGNING else "group")
            self.next()  # \end
            if self.raw_group().strip() != env:
                raise _Refused("\\end of another environment")
            return "atom"
        raise _Refused(f"\\{w}")


def katex_ok(latex: str, display: bool = False) -> bool:
    """Whether KaTeX renders ``latex`` (the inside of one math fragment) without a parse error.
    Conservative: False for anything outside the subset checked here."""
    if not latex.strip() or len(latex) > _MAX_MATH or "$" in latex.replace("\\$", ""):
        return False
    if "\n\n" in re.sub(r"[ \t]+\n", "\n", latex) and not display:
        return False
    try:
        _Checker(latex, display).check()
    except (_Refused, RecursionError):
        return False
    return True


# ─── splitting prose into text and math ──────────────────────────────────────────────────────

@dataclass(frozen=True)
class Fragment:
    """A piece of prose: ``kind`` "text" (shown as typed) or "math" (``value`` is the LaTeX inside its
    delimiters, ``source`` the fragment as written, delimiters included)."""

    kind: str
    value: str
    display: bool = False
    source: str = ""


_ENV_START = re.compile(r"\\begin\{(" + "|".join(re.escape(e) for e in sorted(DISPLAY_ENVIRONMENTS)) + r")\}")


def _balanced(text: str, start: int) -> int | None:
    """Index just past the ``}`` closing the ``{`` at ``start`` (escaped braces skipped), or None."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _inline_dollar_end(text: str, start: int) -> int | None:
    """The index of the ``$`` closing an inline ``$`` at ``start`` under pandoc's rule, or None."""
    if start + 1 >= len(text) or text[start + 1] in " \t\n$":
        return None
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "\n" and text[i + 1:i + 2] == "\n":
            return None
        if c == "$":
            if text[i - 1] in " \t\n" or text[i + 1:i + 2].isdigit():
                return None
            return i
        i += 1
    return None


def _raw_fragments(text: str) -> Iterator[tuple[str, str, bool, str]]:
    """(kind, value, display, source) in order; math not yet checked."""
    buf: list[str] = []
    i, n = 0, len(text)

    def flush():
        if buf:
            s = "".join(buf)
            buf.clear()
            return ("text", s, False, s)
        return None

    while i < n:
        c = text[i]
        found = None  # (value, display, end)
        if c == "\\" and i + 1 < n:
            d = text[i + 1]
            if d in "[(":
                close = "\\]" if d == "[" else "\\)"
                j = text.find(close, i + 2)
                if j >= 0:
                    found = (text[i + 2:j], d == "[", j + 2)
            elif d == "b" and text.startswith("\\boxed{", i):
                j = _balanced(text, i + 6)
                if j is not None:
                    found = (text[i:j], False, j)
            elif d == "b" and (m := _ENV_START.match(text, i)):
                end = f"\\end{{{m.group(1)}}}"
                j = text.find(end, m.end())
                if j >= 0:
                    found = (text[i:j + len(end)], True, j + len(end))
            if found is None:  # an escaped character (\$, \\) stays text as written
                buf.append(text[i:i + 2])
                i += 2
                continue
        elif c == "$":
            if text.startswith("$$", i):
                j = text.find("$$", i + 2)
                if j >= 0:
                    found = (text[i + 2:j], True, j + 2)
            else:
                j = _inline_dollar_end(text, i)
                if j is not None:
                    found = (text[i + 1:j], False, j + 1)
        if found is None:
            buf.append(c)
            i += 1
            continue
        value, display, end = found
        f = flush()
        if f:
            yield f
        yield ("math", value, display, text[i:end])
        i = end
    f = flush()
    if f:
        yield f


def fragments(text: str) -> list[Fragment]:
    """``text`` as text and math fragments; a math fragment KaTeX would not take becomes text (as
    written, delimiters included). Adjacent text fragments are merged."""
    out: list[Fragment] = []
    for kind, value, display, source in _raw_fragments(text.replace("\r\n", "\n")):
        if kind == "math" and not katex_ok(value, display):
            kind, value, display = "text", source, False
        if kind == "text" and out and out[-1].kind == "text":
            prev = out.pop()
            value = source = prev.value + value
        out.append(Fragment(kind, value, display, source))
    return out


# ─── Markdown out ───────────────────────────────────────────────────────────────────────────

_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
ZWSP = "\u200b"
NBSP = "\u00a0"


_BREAK_AFTER = {":", "@"}  # :emoji: / :color[…] / :material/…: shortcodes, e-mail autolinks
_BREAK_PAIRS = {("-", ">"), ("<", "-"), ("-", "-"), (">", "="), ("<", "="), ("~", "=")}  # Streamlit's -> → …


def escape_text(text: str) -> str:
    """Text as Markdown that Streamlit renders as exactly this text. Every ASCII punctuation character is
    escaped. Some rewrites act on the text after the escapes are resolved, so a zero-width space breaks
    their patterns: after ``:`` (``:smile:``, ``:red[…]``, ``:streamlit:``) and ``@`` (e-mail
    autolinks), between ``www`` and ``.`` (www autolinks; ``http://`` is broken by the one after ``:``),
    and inside ``->``, ``<-``, ``--``, ``>=``, ``<=``, ``~=`` (which Streamlit turns into arrows and
    signs). Newlines become hard line breaks, indentation no-break spaces. No blank line is produced
    here (paragraphs are :func:`to_markdown`'s)."""
    out = []
    for line_no, line in enumerate(text.split("\n")):
        if line_no:
            out.append("\\\n")
            stripped = line.lstrip(" \t")
            lead = line[:len(line) - len(stripped)]
            out.append(NBSP * (lead.count(" ") + 4 * lead.count("\t")))
            line = stripped
        for j, ch in enumerate(line):
            nxt = line[j + 1:j + 2]
            if ch in _PUNCT:
                out.append("\\" + ch)
                if ch in _BREAK_AFTER or (ch, nxt) in _BREAK_PAIRS:
                    out.append(ZWSP)
            elif ch == "\t":
                out.append(NBSP * 4)
            elif ch.isprintable() or ch == " ":
                out.append(ch)
                if ch in "wW" and nxt == "." and line[max(0, j - 2):j + 1].lower() == "www":
                    out.append(ZWSP)
            else:
                out.append("\ufffd")
    return "".join(out)


def _paragraphs(text: str) -> list[str]:
    return re.split(r"\n[ \t]*\n\s*", text)


def fold(text: str, limit: int) -> str | None:
    """The first ``limit`` characters or so of ``text`` for a folded view, cut between fragments or inside
    a text fragment, never inside a formula; None when ``text`` is short enough to show whole."""
    if len(text) <= limit:
        return None
    out, used = [], 0
    for f in fragments(text):
        if used + len(f.source) <= limit:
            out.append(f.source)
            used += len(f.source)
            continue
        if f.kind == "text" or not out:
            out.append(f.source[:limit - used])
        break
    return "".join(out)


def to_markdown(text: str | None) -> str:
    """Prose (a problem, a response, a solution) as Markdown for ``st.markdown`` without HTML: the math
    KaTeX takes typeset, everything else shown as written."""
    if text is None:
        return ""
    blocks: list[str] = []
    line: list[str] = []

    def flush():
        s = re.sub(r"(?:\\\n[\u00a0 \t]*)+$", "", "".join(line).rstrip(" \t"))  # no hard break at either end
        s = re.sub(r"^[\u00a0 \t]*(?:\\\n[\u00a0 \t]*)+", "", s).strip(" \n")
        if s:
            blocks.append(s)
        line.clear()

    for f in fragments(str(text)):
        if f.kind == "math" and f.display:
            flush()
            blocks.append("$$\n" + re.sub(r"\n\s*\n", "\n", f.value.strip()) + "\n$$")
        elif f.kind == "math":
            if line and line[-1].endswith("$"):
                line.append(" ")
            inner = " ".join(f.value.split("\n")).strip()
            line.append("$" + inner + (" $" if inner.endswith("\\") else "$"))  # "\\$" would escape the dollar
        else:
            parts = _paragraphs(f.value)
            for k, part in enumerate(parts):
                if k:
                    flush()
                line.append(escape_text(part))
    flush()
    return "\n\n".join(blocks)


_WORD = re.compile(r"[A-Za-z]{3,}")
_TEXT_GROUPS = re.compile(r"\\(text|textbf|textit|textrm|mathrm|mbox|operatorname|mathbf|mathit|textnormal)\s*\{[^{}]*\}")
_MACROS = re.compile(r"\\[A-Za-z]+")


def looks_like_formula(text: str) -> bool:
    """A bare answer that reads as a formula rather than words: no run of three letters outside
    macros and ``\\text{}``-like groups (``\\frac{\\pi}{2}``, ``x^2+1``, ``\\text{Evelyn}``; not
    ``3 inches``)."""
    rest = _MACROS.sub(" ", _TEXT_GROUPS.sub(" ", text))
    return not _WORD.search(rest)


def decode_gold(raw: str | None) -> str | None:
    """The store keeps a problem's raw answer field JSON-encoded: the text it holds (a list's items
    joined by newlines), or ``raw`` itself when it is not JSON."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return raw
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def answer_markdown(text: str | None) -> str:
    """A gold or an extracted answer (often bare LaTeX) as Markdown: typeset whole where KaTeX takes it
    and it reads as a formula, else as prose (:func:`to_markdown`)."""
    if text is None:
        return ""
    s = str(text).strip()
    if s and "$" not in s and "\\(" not in s and "\\[" not in s and "\n" not in s and looks_like_formula(s) \
            and katex_ok(s):
        return "$" + s + "$"
    return to_markdown(s)
