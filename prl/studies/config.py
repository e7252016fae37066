"""A study's typed configuration (``configs/study/*.yaml``): a base training run, the cells that
vary it, the seeds that replicate every cell, and how each cell is evaluated.

    study:   id, out_dir, db, seeds, baseline, concurrency, warm_start, eval
    base:    a training config (algorithm: and train:) every cell starts from
    cells:   a list; each has a name, algorithm:/train: keys over the base, and optionally a
             grid: {algorithm.eta: [5, 20, 80]} that expands it into one cell per value
    claims:  optional; each a claim the study tests, one cell against others on one metric, that the report
             gives a verdict (holds here / not shown at this scale / contradicted) from seed-matched CIs

Everything is checked before anything runs (:func:`load_study`), with messages that say how to fix
the file: a PRL key on a GRPO cell, a grid with no cells, seeds that collide, two cells that are
the same run, a baseline that is not a cell, a cell whose training config is invalid.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from prl_core.config import AlgorithmConfig, ConfigError
from prl_core.estimators import ESTIMATOR_KEYS, estimator_names, get_estimator, readers_of

from prl.store.db import store_path
from prl.config_files import read_yaml
from prl.training.config import RunConfig, TrainConfig, WarmStart, train_from_dict
from prl.training.monitors import MonitorConfig

RUN_KEYS = ("model", "out_dir", "db", "run_id", "seed")
"""TrainConfig fields the study sets for every cell itself (where it trains, what it starts from, its seed):
a cell or the base may not set them."""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")


@dataclass(frozen=True)
class StudyEval:
    """How every cell's final policy is evaluated (one eval run per cell and seed, by the trainer's own
    rollout engine at its max_tokens and temperature 1)."""

    datasets: tuple[str, ...] = ("synth_test",)
    """Data sets (``name`` or ``name:K`` for the first K problems), as ``prl eval --dataset``."""
    n: int = 4
    """Samples per problem (average@n and pass@k for k = 1..n)."""
    limit: int | None = None
    """Problems per data set (None: all)."""


@dataclass(frozen=True)
class StudySettings:
    """The ``study:`` section."""

    id: str
    """Study id: every cell's runs are tagged with it (``<id>.<cell>.s<seed>``)."""
    out_dir: str = ""
    """Where the cells train and the report is written (default runs/study/<id>)."""
    db: str | None = None
    """Store of every cell's training and evaluation runs (default OUT_DIR/store.duckdb)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds; each cell runs once per seed (seeds are the unit of replication of the report's CIs)."""
    baseline: str | None = None
    """The cell every other is compared with, seed by seed (default: the first cell whose estimator is grpo)."""
    concurrency: int = 1
    """Cells that train at once (a Prefect concurrency limit). 1 on CPU: two trainers on 2 cores oversubscribe
    OpenMP and run far slower than one after the other."""
    warm_start: WarmStart | None = None
    """Build and warm-start the embedded tiny model as the base model (instead of base.train.model), once for
    the whole study (cells then differ only in what the grid says): ``prl.training.config.WarmStart``."""
    eval: StudyEval = field(default_factory=StudyEval)
    """How the cells are evaluated."""

    @property
    def store(self) -> str:
        return store_path(self.out_dir, self.db)


CLAIM_METRICS = ("heldout/entropy", "heldout/drift", "heldout/kl_ref", "actor/kl_ref", "actor/entropy")
"""Training-run metrics a claim may name (besides an evaluation's ``average@n`` and ``pass@k``): the heldout ones
at the final evaluation, the ``actor/`` ones as the mean of the last 10 steps."""


@dataclass(frozen=True)
class Claim:
    """One claim a study tests: ``cell`` against each of ``against`` on ``metric``."""

    id: str
    """A short name (the report's row)."""
    text: str
    """The claim in words, as its source states it."""
    metric: str
    """``pass@k`` (k <= study.eval.n), ``average@n``, or one of CLAIM_METRICS."""
    higher: bool
    """Whether the claim is that ``cell`` is higher (true) or lower (false) than the others."""
    cell: str
    """The cell the claim is about."""
    against: tuple[str, ...]
    """The cells it is compared with, seed by seed."""
    source: str = ""
    """Where the claim is made (paper and place)."""


@dataclass(frozen=True)
class Cell:
    """One setting of the study: a name and the training config it stands for (without run keys)."""

    name: str
    run: RunConfig
    varied: tuple[str, ...]
    """Dotted keys this cell sets over the base (its own keys and its grid keys)."""

    def run_id(self, study: str, seed: int) -> str:
        return f"{study}.{self.name}.s{seed}"


@dataclass(frozen=True)
class Study:
    settings: StudySettings
    base: dict[str, Any]
    cells: tuple[Cell, ...]
    source: str
    raw: dict[str, Any]
    claims: tuple[Claim, ...] = ()

    @property
    def id(self) -> str:
        return self.settings.id

    @property
    def baseline(self) -> str:
        return self.settings.baseline  # type: ignore[return-value]  # resolved in load_study

    def cell(self, name: str) -> Cell:
        return next(c for c in self.cells if c.name == name)

    def jobs(self) -> list[tuple[Cell, int]]:
        """Every (cell, seed) pair, seed-major: the first seed of every cell first, so that an interrupted
        study already holds a comparable row of cells."""
        return [(c, s) for s in self.settings.seeds for c in self.cells]

    def cell_config(self, cell: Cell, seed: int, model: str) -> RunConfig:
        """The cell's training run for one seed: its own directory, run id, seed and the study's store."""
        rc = copy.deepcopy(cell.run)
        t = rc.train
        t.model, t.seed, t.db = model, seed, self.settings.store
        t.run_id = cell.run_id(self.id, seed)
        t.out_dir = str(Path(self.settings.out_dir) / "cells" / cell.name / f"s{seed}")
        # the trainer evaluates its final policy with its own rollout engine (no second engine start):
        # eval run <run_id>@step<steps>, linked to the training run and step
        ev = self.settings.eval
        t.eval_every, t.eval_datasets, t.eval_n, t.eval_limit = 0, tuple(ev.datasets), ev.n, ev.limit
        return rc

    def eval_run_id(self, cell: Cell, seed: int) -> str:
        return f"{cell.run_id(self.id, seed)}@step{cell.run.train.steps}"

    def to_dict(self) -> dict[str, Any]:
        return {"study": json.loads(json.dumps(asdict(self.settings), default=list)), "base": self.base,
                "cells": [{"name": c.name, "varied": list(c.varied), **c.run.to_dict()} for c in self.cells],
                "claims": [{**asdict(c), "against": list(c.against)} for c in self.claims]}


def _fail(source: str, where: str, msg: str) -> ConfigError:
    return ConfigError(f"{source}: {where}: {msg}")


def _section(data: Any, name: str, source: str, known: set[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(source, name, f"expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - known)
    if unknown:
        raise _fail(source, name, f"unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")
    return data


def _dataclass_from(cls, data: dict[str, Any], name: str, source: str, **extra):
    data = _section(data, name, source, {f.name for f in fields(cls)} - set(extra))
    try:
        return cls(**{**data, **extra})
    except TypeError as e:
        raise _fail(source, name, str(e)) from None


def _settings(data: dict[str, Any], source: str) -> StudySettings:
    known = {f.name for f in fields(StudySettings)}
    data = dict(_section(data, "study", source, known))
    sid = data.get("id")
    if not isinstance(sid, str) or not NAME.match(sid):
        raise _fail(source, "study.id", f"give the study a name of letters, digits and -_.=+ (got {sid!r})")
    seeds = data.get("seeds", StudySettings.seeds)
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise _fail(source, "study.seeds", f"give a list of one or more integer seeds, e.g. [0, 1, 2] (got {seeds!r})")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise _fail(source, "study.seeds", f"seeds must be integers >= 0, got {list(seeds)}")
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise _fail(source, "study.seeds", f"seed(s) {repeated} appear more than once: a repeated seed reruns the "
                    "same training and counts it twice as if it were independent; list each seed once")
    conc = data.get("concurrency", 1)
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise _fail(source, "study.concurrency", f"expected an integer >= 1, got {conc!r}")
    ws = data.get("warm_start")
    warm = None if ws is None else _dataclass_from(WarmStart, ws, "study.warm_start", source)
    ev = dict(data.get("eval") or {})
    if "datasets" in ev:
        if isinstance(ev["datasets"], str) or not ev["datasets"]:
            raise _fail(source, "study.eval.datasets", f"give a list of data sets, got {ev['datasets']!r}")
        ev["datasets"] = tuple(ev["datasets"])
    evaluation = _dataclass_from(StudyEval, ev, "study.eval", source)
    if not isinstance(evaluation.n, int) or evaluation.n < 1:
        raise _fail(source, "study.eval.n", f"expected an integer >= 1, got {evaluation.n!r}")
    return StudySettings(id=sid, out_dir=str(data.get("out_dir") or f"runs/study/{sid}"), db=data.get("db"),
                         seeds=tuple(seeds), baseline=data.get("baseline"), concurrency=conc, warm_start=warm,
                         eval=evaluation)


def _set_dotted(target: dict[str, Any], key: str, value: Any, source: str, where: str) -> None:
    section, _, name = key.partition(".")
    if section not in ("algorithm", "train") or not name or "." in name:
        raise _fail(source, where, f"grid key {key!r}: expected algorithm.NAME or train.NAME")
    target.setdefault(section, {})[name] = value


def _short(key: str, value: Any) -> str:
    name = key.split(".")[-1]
    text = {"step_split": "split"}.get(name, name) + (
        str(value).replace("\n", "n").replace("\\", "").replace(":", "") if not isinstance(value, str)
        or value.replace("\n", "").isalnum() else "-" + re.sub(r"[^A-Za-z0-9]+", "", value.replace("\n", "n")))
    return text


def _expand(entry: Any, index: int, source: str) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """One ``cells:`` entry → [(name, {algorithm:…, train:…} overrides, varied keys)], its grid expanded."""
    where = f"cells[{index}]"
    entry = _section(entry, where, source, {"name", "algorithm", "train", "grid"})
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise _fail(source, f"{where}.name", f"every cell needs a name of letters, digits and -_.=+ (got {name!r})")
    where = f"cell {name!r}"
    over = {s: dict(_section(entry.get(s), f"{where} {s}", source, _known(s))) for s in ("algorithm", "train")}
    for s in ("algorithm", "train"):
        for k in over[s]:
            if s == "train" and k in RUN_KEYS:
                raise _fail(source, f"{where} train.{k}", "set by the study for every cell (study.out_dir, study.db, "
                            "study.seeds, the base model); remove it from the cell")
    own = tuple(f"{s}.{k}" for s in ("algorithm", "train") for k in over[s])
    grid = entry.get("grid")
    if grid is None:
        return [(name, over, own)]
    if not isinstance(grid, dict) or not grid:
        raise _fail(source, f"{where} grid", "a grid expands into no cells: give at least one key with a list of "
                    "values, e.g. grid: {algorithm.eta: [5, 20, 80]}")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise _fail(source, f"{where} grid.{key}", f"expected a non-empty list of values, got {values!r} (a grid "
                        "with an empty list has no cells)")
        if len(set(map(json.dumps, values))) != len(values):
            raise _fail(source, f"{where} grid.{key}", f"repeated values {values}: each would be the same cell")
        section, _, k = key.partition(".")
        if section == "train" and k in RUN_KEYS:
            raise _fail(source, f"{where} grid.{key}", "seeds are the study's replication (study.seeds), not a "
                        "grid axis; run keys are set by the study")
        if key in own:
            raise _fail(source, f"{where} grid.{key}", f"also set in the cell's own {section}: section; keep one")
    out = []
    for combo in itertools.product(*grid.values()):
        o = copy.deepcopy(over)
        for key, value in zip(grid, combo):
            _set_dotted(o, key, value, source, f"{where} grid")
        suffix = "-".join(_short(k, v) for k, v in zip(grid, combo))
        out.append((f"{name}-{suffix}", o, own + tuple(grid)))
    return out


def _known(section: str) -> set[str]:
    cls = AlgorithmConfig if section == "algorithm" else TrainConfig
    return {f.name for f in fields(cls)}


def _cell_run(base: dict[str, Any], over: dict[str, Any], name: str, source: str) -> RunConfig:
    algo = dict(base.get("algorithm") or {})
    own_algo = over.get("algorithm", {})
    estimator = own_algo.get("estimator", algo.get("estimator", AlgorithmConfig.estimator))
    try:
        reads = set(get_estimator(estimator).keys)
    except (KeyError, ValueError):
        reads = set(ESTIMATOR_KEYS)  # an unknown estimator: AlgorithmConfig below names it and the choices
    given = [k for k in ESTIMATOR_KEYS if k in own_algo and k not in reads]
    if given:
        readers = sorted({e for k in given for e in readers_of(k)}, key=estimator_names().index)
        raise _fail(source, f"cell {name!r}", f"{', '.join('algorithm.' + k for k in given)}: only used by the "
                    f"{', '.join(readers)} estimators, but this cell trains {estimator}: remove them from the "
                    f"cell, or set algorithm.estimator: {readers[0]}")
    # estimator-specific settings of the base reach only cells whose estimator reads them (others ignore them)
    algo = {k: v for k, v in algo.items() if k not in ESTIMATOR_KEYS or k in reads}
    algo.update(own_algo)
    train = {**(base.get("train") or {}), **over.get("train", {}), "model": "<study base model>"}
    try:
        a = AlgorithmConfig.from_dict(algo, source=f"cell {name!r} algorithm")
        t = train_from_dict(train, source=f"cell {name!r} train")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    try:
        t.validate(a)
    except ConfigError as e:
        raise ConfigError(f"{source}: cell {name!r}: {e}") from None
    try:
        m = MonitorConfig.from_dict(base.get("monitors"), source="base monitors")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return RunConfig(a, t, m)


def load_study(path: str | Path, *, study_id: str | None = None) -> Study:
    """Read and check a study config; every error names the file and the key, and says how to fix it."""
    source = str(path)
    data = read_yaml(path, "study config")
    data = _section(data, "top level", source, {"study", "base", "cells", "claims"})
    study_section = dict(data.get("study") or {})
    if study_id:
        study_section["id"] = study_id
    settings = _settings(study_section, source)
    base = _section(data.get("base"), "base", source, {"algorithm", "train", "monitors"})
    for k in (base.get("train") or {}):
        if k in RUN_KEYS and k != "model":
            raise _fail(source, f"base.train.{k}", "set by the study (study.out_dir, study.db, study.seeds); remove it")
    if settings.warm_start is None and not (base.get("train") or {}).get("model"):
        raise _fail(source, "base.train.model", "give the starting model directory, or study.warm_start: {} to "
                    "build and warm-start the embedded tiny model")
    if settings.warm_start is not None and (base.get("train") or {}).get("model"):
        raise _fail(source, "base.train.model", "both a model and study.warm_start are given; keep one")
    entries = data.get("cells")
    if not isinstance(entries, list) or not entries:
        raise _fail(source, "cells", "the study has no cells: list at least two, e.g. a grpo cell (the baseline) "
                    "and a prl cell")
    expanded = [x for i, e in enumerate(entries) for x in _expand(e, i, source)]
    cells: list[Cell] = []
    for name, over, varied in expanded:
        if any(c.name == name for c in cells):
            raise _fail(source, f"cell {name!r}", "two cells have this name (after grids are expanded); rename one")
        cells.append(Cell(name, _cell_run(base, over, name, source), varied))
    seen: dict[str, str] = {}
    for c in cells:
        key = json.dumps(c.run.to_dict(), sort_keys=True, default=list)
        if key in seen:
            raise _fail(source, f"cell {c.name!r}", f"trains exactly what cell {seen[key]!r} trains: with the same "
                        "seeds the two would be one run counted twice; change or remove one")
        seen[key] = c.name
    baseline = settings.baseline
    if baseline is None:
        baseline = next((c.name for c in cells if c.run.algorithm.estimator == "grpo"), None)
        if baseline is None:
            raise _fail(source, "study.baseline", "no cell trains grpo; name the baseline cell (study.baseline)")
    elif baseline not in {c.name for c in cells}:
        raise _fail(source, "study.baseline", f"{baseline!r} is not a cell; cells: {', '.join(c.name for c in cells)}")
    settings = StudySettings(**{**{f.name: getattr(settings, f.name) for f in fields(StudySettings)},
                                "baseline": baseline})
    model = (base.get("train") or {}).get("model")
    if model:
        cells = [Cell(c.name, RunConfig(c.run.algorithm, _with(c.run.train, model=model), c.run.monitors), c.varied) for c in cells]
    claims = _claims(data.get("claims"), {c.name for c in cells}, settings.eval.n, source)
    return Study(settings, base, tuple(cells), source, data, claims)


def _claims(data: Any, cells: set[str], n: int, source: str) -> tuple[Claim, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise _fail(source, "claims", f"expected a list of claims, got {type(data).__name__}")
    out: list[Claim] = []
    known = {f.name for f in fields(Claim)}
    for i, entry in enumerate(data):
        where = f"claims[{i}]"
        entry = dict(_section(entry, where, source, known))
        missing = sorted({"id", "text", "metric", "higher", "cell", "against"} - set(entry))
        if missing:
            raise _fail(source, where, f"missing key(s) {', '.join(missing)}")
        m = entry["metric"]
        k = re.fullmatch(r"pass@(\d+)", str(m))
        if not (m in CLAIM_METRICS or m == f"average@{n}" or (k and 1 <= int(k.group(1)) <= n)):
            raise _fail(source, f"{where}.metric", f"{m!r} is not one of pass@1..pass@{n}, average@{n}, "
                        f"{', '.join(CLAIM_METRICS)}")
        if not isinstance(entry["higher"], bool):
            raise _fail(source, f"{where}.higher", f"expected true or false, got {entry['higher']!r}")
        against = entry["against"] if isinstance(entry["against"], list) else [entry["against"]]
        for c in [entry["cell"], *against]:
            if c not in cells:
                raise _fail(source, where, f"{c!r} is not a cell; cells: {', '.join(sorted(cells))}")
        out.append(Claim(**{**entry, "against": tuple(against)}))
    if len({c.id for c in out}) != len(out):
        raise _fail(source, "claims", "two claims have the same id")
    return tuple(out)


def _with(t: TrainConfig, **changes: Any) -> TrainConfig:
    t = copy.deepcopy(t)
    for k, v in changes.items():
        setattr(t, k, v)
    return t


def config_differences(configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{dotted key: {cell: value}} for every key of the cells' (flattened) training configs that is not the
    same in all of them, run keys (model, out_dir, db, run_id, seed) left out."""
    flat = {name: _flatten(cfg) for name, cfg in configs.items()}
    keys = sorted(set().union(*(f.keys() for f in flat.values()))) if flat else []
    ignore = {f"train.{k}" for k in RUN_KEYS}
    out = {}
    for k in keys:
        if k in ignore:
            continue
        values = {name: f.get(k) for name, f in flat.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out[k] = values
    return out


def _flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k in ("algorithm", "train"):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


def implied_keys(varied: set[str]) -> set[str]:
    """Keys that follow from the varied ones: changing the estimator changes which estimator-specific settings exist and
    (dr_grpo) the std division."""
    if "algorithm.estimator" in varied:
        return varied | {f"algorithm.{k}" for k in ESTIMATOR_KEYS} | {"algorithm.normalize_std"}
    return varied
