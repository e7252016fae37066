"""Command-line options from typed config dataclasses: one source for flags, defaults and help.

A config's fields carry their type, default and a one-line docstring (the string literal right
after the field); :func:`add_config_arguments` turns the fields a command exposes into argparse
options with that help and default, and :func:`config_kwargs` reads them back as keyword
arguments for the config. ``prl eval`` (``EvalConfig``), ``prl model sft`` (``SFTConfig``),
``prl demo`` (``PipelineConfig``) and ``prl train`` / the training script (``TrainConfig``
overrides) build their options this way.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from functools import cache
from typing import Any, Sequence


@cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: its docstring's first sentence} of a dataclass (the string literal after each field)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            text = " ".join(nxt.value.value.split())
            docs[node.target.id] = text.split(". ")[0]
    return docs


def _base_type(annotation: Any) -> tuple[type, bool]:
    """(element type, is a sequence) of a field annotation: int, float, str, bool, X | None, tuple[str, ...]."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(args[0])
    if origin in (tuple, list):
        return typing.get_args(annotation)[0], True
    return annotation, False


def _comma_list(kind: type):
    def parse(text: str) -> tuple:
        return tuple(kind(x.strip()) for x in text.split(",") if x.strip())
    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, names: Sequence[str], *,
                         aliases: dict[str, Sequence[str]] | None = None, required: Sequence[str] = (),
                         choices: dict[str, Sequence[str]] | None = None,
                         negate: dict[str, tuple[str, str]] | None = None,
                         from_file: bool = False, overrides: bool = False) -> None:
    """Add ``--field-name`` options for ``names`` of dataclass ``cls``: type, default and help from the field.

    ``aliases``: extra option strings per field (kept for existing commands, e.g. ``--chunk``).
    ``negate``: {field: (switch, help)}: a bool field that defaults to True gets only this switch, which
    sets it False.
    ``from_file``: the values override a config file, so every default is None ("the file's").
    ``overrides``: every default is None (only given options are set), the help shows the field's default.
    Sequence fields take comma-separated values.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    docs = field_docs(cls)
    for name in names:
        f = fields[name]
        kind, many = _base_type(hints[name])
        field_default = f.default if f.default is not dataclasses.MISSING else None
        default = None if (from_file or overrides) else field_default
        doc = docs.get(name, "").rstrip(".").replace("``", "`").replace("%", "%%")
        flags = ["--" + name.replace("_", "-"), *(aliases or {}).get(name, ())]
        if name in (negate or {}):
            switch, text = negate[name]
            parser.add_argument(switch, dest=name, action="store_false", default=default,
                                help=text)
            continue
        if kind is bool:
            parser.add_argument(*flags, dest=name, action="store_true", default=default,
                                help=doc)
            continue
        if from_file:
            shown = "the config file's"
        elif many and field_default is not None:
            shown = ",".join(map(str, field_default))
        else:
            shown = repr(field_default) if isinstance(field_default, str) and field_default.strip() != field_default \
                else field_default
        parser.add_argument(*flags, dest=name, type=_comma_list(kind) if many else kind, default=default,
                            required=name in required, choices=(choices or {}).get(name),
                            help=doc if name in required or (field_default is None and not from_file) or "default" in doc.lower()
                            else f"{doc} (default: {shown})")


def config_kwargs(args: argparse.Namespace, cls: type, names: Sequence[str]) -> dict[str, Any]:
    """The options of ``names`` as keyword arguments of ``cls`` (None values left out)."""
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
