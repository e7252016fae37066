"""Prefect flows of the pipeline; deployments are declared in ../prefect.yaml.

- ``evaluate.evaluate``: benchmarks → generation → Math-Verify → store (resumable).
- ``train.train``: PRL / GRPO / Dr.GRPO / RAFT on DeepSpeed (resumable from checkpoints).
- ``pipeline.pipeline``: the main job (``prl demo``): data, tiny model, warm start, PRL and its
  GRPO twin, evaluation of all three, report.
- ``report.report_flow``: ``prl report`` as a deployment.

The logic lives in ``prl`` (and the algorithm in ``prl_core``); these modules only run its steps
as tasks.
"""
