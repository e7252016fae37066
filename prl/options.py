"""Command-line options from typed config dataclasses: one source for flags, defaults and help.

A config's fields carry their type, default and a one-line docstring (the string literal right
after the field); :func:`add_config_arguments` turns the fields a command exposes into argparse
options with that help and default, and :func:`config_kwargs` reads them back as keyword
arguments for the config. Every ``prl`` command builds its options this way: from the config it
runs (``EvalConfig``, ``ImportConfig``, ``SFTConfig``, ``PipelineConfig``, ``TrainConfig`` overrides,
``SamplingConfig``, ``RescoreConfig``) or from a small options record of its own in ``prl_cli``.

A command exposes every field of its record (:func:`flag_names`) except those whose metadata is
:data:`NO_FLAG` (set by code, never by a user). :func:`include_fields` gives a record the fields of
another (``VerifierSettings`` in the eval, import, rescore and training configs), defined once.

One vocabulary across commands (docs/architecture.md §The command line): a field whose option is spelled
otherwise than its name says so in its metadata (:func:`option`'s ``spelling``: ``EvalConfig.datasets`` is
``--dataset``, like every other command's); the old spelling (the field's own, and any in ``was``) still
works, hidden from the help, and prints one line naming the new one.
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

NO_FLAG = {"flag": False}
"""Field metadata: no command-line option for this field (code sets it, e.g. ``EvalConfig.parent_run_id``)."""
POSITIONAL = {"flag": "positional"}
"""Field metadata: a positional argument (a sequence field: one or more values)."""
REPEATED = {"flag": "repeat"}
"""Field metadata: a sequence given by repeating the option (``--stop A --stop B``: values may hold commas)."""


def include_fields(*records: type):
    """Class decorator, placed under ``@dataclass``: the fields of each dataclass in ``records`` (type,
    default and docstring) become fields of the class too, after its own, so a group of settings that
    several configs share is written once. The flat names stay (``EvalConfig(verifier_workers=1)``, the
    YAML key ``verifier_workers``); :func:`field_docs` finds their docstrings in the record."""
    def add(cls: type) -> type:
        own = cls.__dict__.get("__annotations__", {})
        annotations = dict(own)
        for record in records:
            hints = typing.get_type_hints(record)
            for f in dataclasses.fields(record):
                if f.name in annotations:
                    raise TypeError(f"{cls.__name__}.{f.name} is already a field of {record.__name__}")
                annotations[f.name] = hints[f.name]
                setattr(cls, f.name, dataclasses.field(default=f.default, default_factory=f.default_factory,
                                                       metadata=f.metadata))
        cls.__annotations__ = annotations
        cls.__included__ = (*cls.__dict__.get("__included__", ()), *records)
        return cls
    return add


def same_as(record: type, name: str, *, was: Sequence[str] = ()) -> Any:
    """A field declared in its own place (``n: int = same_as(SamplingConfig, "n")``) whose default, metadata and
    docstring are those of ``record``'s field ``name``: one field of a record that a config repeats, without
    restating its default or its help. ``was``: old spellings of its option (:func:`option`)."""
    f = {f.name: f for f in dataclasses.fields(record)}[name]
    extra = {"was": {**f.metadata.get("was", {}), **{w: _SAME for w in was}}} if was else {}
    return dataclasses.field(default=f.default, default_factory=f.default_factory,
                             metadata={**f.metadata, **extra, "same_as": record})


def flag_names(cls: type) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` a command exposes as options: all but those marked :data:`NO_FLAG`."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("flag", True) is not False)


@cache
def _module_classes(filename: str) -> dict[str, ast.ClassDef]:
    """{name: class definition} of the top-level classes of a source file, parsed once (``prl --help`` reads the
    docstrings of some twenty records from a handful of modules)."""
    with open(filename, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _class_body(cls: type) -> list[ast.stmt]:
    """The statements of ``cls``'s definition: from its module's parsed source, or (a nested or generated class)
    from ``inspect.getsource``."""
    try:
        node = _module_classes(inspect.getsourcefile(cls) or "").get(cls.__qualname__)
    except (OSError, TypeError, SyntaxError):
        node = None
    if node is None:
        node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]  # type: ignore[assignment]
    return node.body  # type: ignore[union-attr]


@cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: its docstring's first sentence} of a dataclass (the string literal after each field)."""
    body = _class_body(cls)
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            text = " ".join(nxt.value.value.split())
            docs[node.target.id] = text.split(". ")[0]
    for record in cls.__dict__.get("__included__", ()):
        docs.update(field_docs(record))
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        if "same_as" in f.metadata:
            docs[f.name] = field_docs(f.metadata["same_as"])[f.name]
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


def add_config_arguments(parser, cls: type, names: Sequence[str] | None = None, *,
                         aliases: dict[str, Sequence[str]] | None = None, required: Sequence[str] = (),
                         choices: dict[str, Sequence[str]] | None = None,
                         negate: dict[str, tuple[str, str]] | None = None,
                         from_file: bool = False, overrides: bool = False) -> None:
    """Add ``--field-name`` options for ``names`` of dataclass ``cls`` (default: :func:`flag_names`): type,
    default and help from the field. ``parser`` may also be an argument group.

    A field without a default is a required option. Field metadata may add ``choices`` and ``metavar``
    (:func:`option`), or make the field :data:`POSITIONAL` or :data:`REPEATED`.
    ``aliases``: extra option strings per field (kept for existing commands, e.g. ``--chunk``).
    ``choices``: {field: allowed values}, where the config's module does not name them itself.
    ``negate``: {field: (switch, help)}: a bool field that defaults to True gets only this switch, which
    sets it False.
    ``from_file``: the values override a config file, so every default is None ("the file's").
    ``overrides``: every default is None (only given options are set), the help shows the field's default.
    Sequence fields take comma-separated values (:data:`REPEATED` ones: the option once per value).
    """
    names = flag_names(cls) if names is None else names
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    docs = field_docs(cls)
    for name in names:
        f = fields[name]
        kind, many = _base_type(hints[name])
        field_default = f.default if f.default is not dataclasses.MISSING else None
        needed = name in required or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        default = None if (from_file or overrides) else field_default
        doc = docs.get(name, "").rstrip(".").replace("``", "`").replace("%", "%%")
        new = option_string(f)
        flags = [*([f.metadata["short"]] if "short" in f.metadata else []), new, *(aliases or {}).get(name, ())]
        extra = {k: f.metadata[k] for k in ("metavar",) if k in f.metadata}
        if "spelling" in f.metadata and "metavar" not in extra:  # --dataset DATASET, not DATASETS
            extra["metavar"] = f.metadata["spelling"].upper()
        allowed = (choices or {}).get(name) or f.metadata.get("choices")
        if name in (negate or {}):
            switch, text = negate[name]
            parser.add_argument(switch, dest=name, action="store_false", default=default,
                                help=text)
            continue
        if f.metadata.get("flag") == "positional":
            parser.add_argument(name, nargs="+" if many else None, type=kind,
                                **({"metavar": name.upper().rstrip("S")} if many else {}), **extra, help=doc)
            continue
        for old, value in old_spellings(f).items():  # hidden; each use says the new spelling
            if value is not _SAME:
                parser.add_argument(old, dest=name, action=_renamed("store_const", f"{new} {value}"), const=value,
                                    default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            elif kind is bool:
                parser.add_argument(old, dest=name, action=_renamed("store_true", new), default=argparse.SUPPRESS,
                                    help=argparse.SUPPRESS)
            else:
                parser.add_argument(old, dest=name, action=_renamed("append" if f.metadata.get("flag") == "repeat"
                                                                    else "store", new),
                                    type=_comma_list(kind) if many and f.metadata.get("flag") != "repeat" else kind,
                                    choices=allowed, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if kind is bool:
            parser.add_argument(*flags, dest=name, action="store_true", default=default,
                                help=doc)
            continue
        if f.metadata.get("flag") == "repeat":
            parser.add_argument(*flags, dest=name, action="append", type=kind, **extra,
                                default=None if (from_file or overrides) else list(field_default or ()),
                                help=f"{doc} (repeatable)")
            continue
        if from_file:
            shown = "the config file's"
        elif many and field_default is not None:
            shown = ",".join(map(str, field_default))
        else:
            shown = repr(field_default) if isinstance(field_default, str) and field_default.strip() != field_default \
                else field_default
        parser.add_argument(*flags, dest=name, type=_comma_list(kind) if many else kind, default=default,
                            required=needed, choices=allowed, **extra,
                            help=doc if needed or (field_default is None and not from_file) or "default" in doc.lower()
                            else f"{doc} (default: {shown})")


def option(default: Any = dataclasses.MISSING, *, choices: Sequence[Any] | None = None, metavar: str | None = None,
           flag: bool | str = True, spelling: str | None = None, was: Sequence[str] | dict[str, Any] = (),
           short: str | None = None) -> Any:
    """A dataclass field with command-line details: the values it accepts, its metavar, and how its option is
    spelled: ``spelling`` (``"dataset"``: ``--dataset``) where the field's name is not the vocabulary's word (the
    field's own spelling then stays as an old one), ``was``: earlier spellings still accepted (``("--runs",)``; a
    mapping gives the value a retired switch stands for: ``{"--json": "json"}`` is ``--format json``), ``short``:
    a one-letter form (``"-q"``)."""
    meta: dict[str, Any] = {k: v for k, v in (("choices", tuple(choices) if choices else None), ("metavar", metavar),
                                              ("spelling", spelling), ("short", short)) if v}
    if was:
        meta["was"] = dict(was) if isinstance(was, dict) else {w: _SAME for w in was}
    if flag is not True:
        meta["flag"] = flag
    return dataclasses.field(default=default, metadata=meta)


_SAME = object()
"""In ``was``: the old spelling takes the same value as the new one."""


def option_string(f: dataclasses.Field) -> str:
    """The option of field ``f``: ``--`` and its ``spelling`` (default: its name), with dashes."""
    return "--" + f.metadata.get("spelling", f.name).replace("_", "-")


def old_spellings(f: dataclasses.Field) -> dict[str, Any]:
    """{old option string: the value it stands for, or ``_SAME``}: the field's own spelling where its option is
    spelled otherwise, and those of ``was``."""
    own = "--" + f.name.replace("_", "-")
    return {**({own: _SAME} if own != option_string(f) else {}), **f.metadata.get("was", {})}


def _renamed(kind: str, new: str) -> type[argparse.Action]:
    """An argparse action of ``kind`` for an old spelling: does what the new one does and says so once on stderr."""
    base = {"store": argparse._StoreAction, "store_true": argparse._StoreTrueAction,
            "store_const": argparse._StoreConstAction, "append": argparse._AppendAction}[kind]

    class Renamed(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            import sys

            print(f"{parser.prog}: {option_string} is now {new} (the old spelling still works)", file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)
    return Renamed


def config_kwargs(args: argparse.Namespace, cls: type, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The options of ``names`` (default: :func:`flag_names`) as keyword arguments of ``cls`` (None values left
    out; repeated options as a tuple)."""
    names = flag_names(cls) if names is None else names
    return {n: tuple(v) if isinstance(v, list) else v for n in names if (v := getattr(args, n, None)) is not None}
