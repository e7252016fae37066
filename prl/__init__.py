"""prl: the application around ``prl_core`` (the pure algorithm), one subpackage per concern.

    prl.manifest     the run manifest: config, seed, versions, git state, machine (one home)
    prl.data         benchmarks, the synthetic task, the paper's tables
    prl.grading      the verifier (verdicts), relevance and the suspicious-pass rule
    prl.generation   prompts and the generation engines (vLLM, transformers)
    prl.models       the embedded tiny model
    prl.store        the DuckDB store (named queries from ``sql/``) and its read-only SQL
    prl.evaluation   evaluation runs, Parquet shards, reports
    prl.training     SFT warm start and the RL trainer (one plain script under DeepSpeed)

Layers (import-linter contracts in pyproject.toml, checked by tests/test_architecture.py):
``prl_core`` ← ``prl`` ← ``flows`` / ``dashboard`` ← ``prl_cli``; nothing imports upward.
"""

__version__ = "0.1.0"
