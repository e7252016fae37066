"""Prefect flows and tasks of the pipeline (data prep, training, generation, verification,
store writes, reports). Deployments are declared in ../prefect.yaml.

Nothing is defined here yet: the flows arrive with the evaluation, training and orchestration
work (issues 4, 5 and 7). The algorithm they call lives in ``prl_core``.
"""
