"""The study report's charts: pure ``DataFrame → plotly Figure`` functions (the report's HTML artifact
and the dashboard's Study page draw the same ones)."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go


def kl_reward(curves: pd.DataFrame) -> go.Figure:
    """Reward against KL-to-reference over training, one line per cell (the seeds' mean at each step).

    ``curves``: columns cell, seed, step, reward, kl (:func:`prl.studies.report.study_report`'s ``curves``).
    The paper's argument: PRL reaches its reward with less KL than GRPO."""
    fig = go.Figure()
    if not curves.empty:
        mean = curves.groupby(["cell", "step"], as_index=False)[["reward", "kl"]].mean()
        for cell, g in mean.groupby("cell", sort=False):
            g = g.sort_values("step")
            fig.add_trace(go.Scatter(x=g["kl"], y=g["reward"], mode="lines+markers", name=str(cell),
                                     text=[f"step {s}" for s in g["step"]],
                                     hovertemplate="%{text}: KL %{x:.4f}, reward %{y:.3f}<extra>" + str(cell)
                                     + "</extra>"))
    fig.update_layout(title="Reward against KL to the reference over training (mean over seeds)",
                      xaxis_title="KL to reference (k3, per token)", yaxis_title="reward (mean)", height=420)
    return fig


def eta_sweep(sweep: pd.DataFrame, baseline: dict | None = None) -> go.Figure:
    """average@n against η with the CI across seeds; the baseline (GRPO, PRL's η → ∞ limit) as a band.

    ``sweep``: columns eta, mean, seed_lo, seed_hi, cell."""
    fig = go.Figure()
    if not sweep.empty:
        s = sweep[sweep["eta"].map(math.isfinite)].sort_values("eta")
        lo = (s["mean"] - s["seed_lo"]).fillna(0)
        hi = (s["seed_hi"] - s["mean"]).fillna(0)
        fig.add_trace(go.Scatter(x=s["eta"], y=s["mean"], mode="lines+markers", name="PRL",
                                 error_y=dict(type="data", array=hi, arrayminus=lo), text=s["cell"],
                                 hovertemplate="η %{x:g}: %{y:.3f}<extra>%{text}</extra>"))
        fig.update_xaxes(type="log")
    if baseline is not None:
        fig.add_hline(y=baseline["mean"], line_dash="dash", annotation_text=f"{baseline['cell']} (η → ∞)")
        if baseline.get("seed_lo") == baseline.get("seed_lo"):  # not NaN
            fig.add_hrect(y0=baseline["seed_lo"], y1=baseline["seed_hi"], opacity=0.1, line_width=0)
    fig.update_layout(title="η sweep (95% CI across seeds)", xaxis_title="η (inverse KL strength)",
                      yaxis_title="average@n", height=380)
    return fig


def pass_at_k(per_cell: pd.DataFrame) -> go.Figure:
    """pass@k for k = 1..n per cell with its CI across seeds. ``per_cell``: columns cell, metric, mean,
    seed_lo, seed_hi (metric 'pass@K' rows are drawn)."""
    fig = go.Figure()
    rows = per_cell[per_cell["metric"].str.startswith("pass@")].copy() if not per_cell.empty else per_cell
    if not rows.empty:
        rows["k"] = rows["metric"].str.removeprefix("pass@").astype(int)
        for cell, g in rows.groupby("cell", sort=False):
            g = g.sort_values("k")
            fig.add_trace(go.Scatter(x=g["k"], y=g["mean"], mode="lines+markers", name=str(cell),
                                     error_y=dict(type="data", array=(g["seed_hi"] - g["mean"]).fillna(0),
                                                  arrayminus=(g["mean"] - g["seed_lo"]).fillna(0))))
    fig.update_layout(title="pass@k per cell (95% CI across seeds)", xaxis_title="k", yaxis_title="pass@k",
                      height=380)
    return fig


def report_figures(rep: dict) -> list[go.Figure]:
    """The report's charts, in order: pass@k, reward against KL, the η sweep (when the study has one)."""
    per_cell = pd.DataFrame(rep["per_cell"])
    figs = [pass_at_k(per_cell), kl_reward(pd.DataFrame(rep["curves"], columns=["cell", "seed", "step", "reward",
                                                                                 "kl"]))]
    if rep["eta_sweep"]:
        base = next((r for r in rep["per_cell"] if r["cell"] == rep["baseline"]
                     and r["metric"].startswith("average@")), None)
        figs.append(eta_sweep(pd.DataFrame(rep["eta_sweep"]), base))
    return figs
