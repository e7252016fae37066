"""AlgorithmConfig: defaults, cross-field rules with fix-it messages, YAML errors naming file and key."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from prl_core import AlgorithmConfig, ConfigError
from prl.config_files import load_algorithm_config

ROOT = Path(__file__).resolve().parents[1]


def test_prl_defaults_resolve():
    cfg = AlgorithmConfig(eta=150)
    assert (cfg.step_split, cfg.order, cfg.normalize_std, cfg.eta) == ("token", "advantage_first", True, 150.0)
    assert AlgorithmConfig(estimator="dr_grpo").normalize_std is False
    assert AlgorithmConfig(estimator="prl", eta="inf").eta == math.inf


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(estimator="grpo", step_split="fixed:256"), r"step_split: only used by the prl, frpo estimators.*Set estimator: prl"),
        (dict(estimator="raft", eta=100), r"eta: only used by the prl, frpo, grpo_fused_kl estimators"),
        (dict(estimator="grpo", order="process_first"), r"order: only used"),
        (dict(estimator="prl"), r"eta: required when estimator is 'prl'"),
        (dict(eta=0), r"eta: must be > 0"),
        (dict(eta=-3.0), r"eta: must be > 0"),
        (dict(eta=float("nan")), r"eta: must be > 0"),
        (dict(eta=100, step_split="lines"), r"step_split: unknown split 'lines'"),
        (dict(eta=100, order="sideways"), r"order: expected"),
        (dict(eta=100, clip_low=1.2), r"clip_low: must be in \(0, 1\)"),
        (dict(eta=100, clip_low=0.0), r"clip_low"),
        (dict(eta=100, clip_high=-0.1), r"clip_high: must be > 0"),
        (dict(eta=100, dual_clip=0.5), r"dual_clip: must be > 1"),
        (dict(estimator="dr_grpo", normalize_std=True), r"normalize_std: dr_grpo is defined without"),
        (dict(eta=100, n_samples=1), r"n_samples: prl needs a group of at least 2"),
        (dict(estimator="ppo"), r"estimator: unknown 'ppo'"),
        (dict(eta=100, loss_agg="sum"), r"loss_agg"),
        (dict(eta=100, kl_loss_coef=-1), r"kl_loss_coef"),
        (dict(estimator="grpo", divergence="forward_kl"), r"divergence: only used by the prl, frpo, grpo_fused_kl"),
        (dict(estimator="frpo", eta=10, order="process_first"), r"order: only used by the prl estimator.*Set estimator: prl"),
        (dict(estimator="frpo"), r"eta: required when estimator is 'frpo'"),
        (dict(estimator="grpo_fused_kl"), r"eta: required when estimator is 'grpo_fused_kl'"),
        (dict(estimator="frpo", eta=10, divergence="kl"), r"divergence: expected one of reverse_kl, forward_kl, chi2, js"),
        (dict(eta=10, rollout_is="is"), r"rollout_is: expected one of tis, mis, off"),
        (dict(eta=10, rollout_is_level="group"), r"rollout_is_level: expected one of token, sequence"),
        (dict(eta=10, rollout_is_cap=1.0), r"rollout_is_cap: must be > 1"),
        (dict(eta=10, rollout_is_cap=float("inf")), r"rollout_is_cap: must be a finite number"),
    ],
)
def test_invalid_combinations_explain_the_fix(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        AlgorithmConfig(**kwargs)


def test_every_field_has_a_one_line_doc():
    src = (ROOT / "prl_core" / "config.py").read_text()
    for f in dataclasses.fields(AlgorithmConfig):
        line = next(l for l in src.splitlines() if l.strip().startswith(f"{f.name}:"))
        following = src.splitlines()[src.splitlines().index(line) + 1].strip()
        assert following.startswith('"""') and following.endswith('"""') and len(following) > 10, f.name


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "algorithm").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    cfg = load_algorithm_config(path)
    assert cfg.estimator in path.stem


def test_yaml_errors_name_file_line_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  estimator: prl\n  eta: [1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_algorithm_config(bad)
    bad.write_text("algorithm:\n  estimator: grpo\n  step_split: fixed:256\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: step_split: only used by the prl, frpo estimators"):
        load_algorithm_config(bad)
    bad.write_text("algorithm:\n  estimator: prl\n  eta: 100\n  etta: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: unknown key\(s\) etta"):
        load_algorithm_config(bad)
    bad.write_text("algorithm:\n  estimator: prl\n  eta: 100\n  clip_low: yes\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: clip_low: expected float, got bool"):
        load_algorithm_config(bad)
    with pytest.raises(ConfigError, match=r"missing\.yaml: no such config file"):
        load_algorithm_config(tmp_path / "missing.yaml")


def test_to_dict_round_trips():
    cfg = AlgorithmConfig(eta="inf", step_split="text:\\n\\n", order="process_first")
    again = AlgorithmConfig.from_dict(cfg.to_dict())
    assert again == cfg


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(estimator="grpo", clip_low="0.2"), r"^clip_low: expected float, got str"),
        (dict(estimator="grpo", eps=True), r"^eps: expected float, got bool"),
        (dict(estimator="grpo", eps=float("inf")), r"^eps: must be a finite number"),
        (dict(estimator="raft", raft_threshold=float("nan")), r"^raft_threshold: must be a finite number"),
        (dict(estimator="grpo", n_samples=2.5), r"^n_samples: expected int"),
    ],
)
def test_types_are_checked_in_code_too(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        AlgorithmConfig(**kwargs)


SHIPPED_ALGORITHMS = {"grpo": ("grpo", 0.0), "dr_grpo": ("dr_grpo", 0.0), "raft": ("raft", 0.0), "prl": ("prl", 0.0),
                      "prl_process_first": ("prl", 0.0), "frpo": ("frpo", 0.0), "grpo_fused_kl": ("grpo_fused_kl", 0.0),
                      "grpo_kl_k1": ("grpo", 0.05), "grpo_kl_k3": ("grpo", 0.05)}


def test_every_shipped_algorithm_config_loads():
    """configs/algorithm/*.yaml: the paper's settings and the comparison arms of paper v2 (docs/architecture.md §The
    comparison arms), each a valid AlgorithmConfig of the estimator (and loss-side KL) its name says."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "configs" / "algorithm"
    assert {p.stem for p in root.glob("*.yaml")} == set(SHIPPED_ALGORITHMS)
    for stem, (estimator, kl) in SHIPPED_ALGORITHMS.items():
        path = root / f"{stem}.yaml"
        cfg = AlgorithmConfig.from_dict(yaml.safe_load(path.read_text())["algorithm"], source=str(path))
        assert (cfg.estimator, cfg.kl_loss_coef) == (estimator, kl), stem
        if stem.startswith("grpo_kl_"):
            assert cfg.kl_estimator == stem[-2:]
        if estimator in ("prl", "frpo", "grpo_fused_kl"):
            assert cfg.divergence == "reverse_kl" and cfg.eta > 0
