"""Reading configuration files: YAML text to the mappings the typed configs are built from.

The configs themselves parse mappings (``prl_core.config.AlgorithmConfig.from_dict``,
``prl.training.config.train_from_dict``, the study files in ``prl.studies.config``); ``prl_core`` reads no files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


from prl_core.config import AlgorithmConfig, ConfigError


def read_yaml(path: str | Path, what: str = "config file") -> Any:
    """A YAML file's content ({} when empty); a missing file or invalid YAML is a ConfigError naming the
    file and the line."""
    import yaml  # here, not at module level: the CLI's options come from configs that import this module

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{mark.line + 1}:" if mark else ""
        raise ConfigError(f"{path}:{where} invalid YAML: {getattr(e, 'problem', e)}") from None
    return data if data is not None else {}


def load_algorithm_config(path: str | Path, section: str = "algorithm") -> AlgorithmConfig:
    """The ``section`` mapping of a YAML file (or the whole file if it has no such key) as an
    :class:`AlgorithmConfig`; errors name the file."""
    doc = read_yaml(path)
    if isinstance(doc, dict) and section in doc:
        doc = doc[section]
    return AlgorithmConfig.from_dict(doc if doc is not None else {}, source=str(path))
