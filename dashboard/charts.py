"""Pure ``DataFrame → plotly Figure`` functions for the dashboard (tested without a browser).

Model and dataset text never reaches a chart as markup: labels are run ids, data-set names and
problem ids, and plotly renders trace text as text.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

PCT = 100.0


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": message, "showarrow": False, "font": {"size": 14}}])
    return fig


def scores_by_dataset(df: pd.DataFrame, metric: str, title: str | None = None) -> go.Figure:
    """Grouped bars per data set (one bar per run) with 95% CI error bars.

    df: run_id, dataset, metric, value, lo, hi (fractions) as from ``data.scores``.
    """
    d = df[df["metric"] == metric]
    if d.empty:
        return _empty(title or metric, "no scores for the selected runs")
    fig = go.Figure()
    for run_id, g in d.groupby("run_id", sort=False):
        fig.add_bar(name=str(run_id), x=g["dataset"], y=g["value"] * PCT,
                    error_y={"type": "data", "symmetric": False, "array": (g["hi"] - g["value"]) * PCT,
                             "arrayminus": (g["value"] - g["lo"]) * PCT})
    k = int(d["k"].iloc[0]) if "k" in d else None
    fig.update_layout(barmode="group", title=title or f"{metric}@{k} by data set (95% bootstrap CI)",
                      yaxis_title="%", xaxis_title="data set", legend_title="run")
    return fig


def pass_at_k_curve(df: pd.DataFrame) -> go.Figure:
    """pass@k (micro) against k, one line per run. df: run_id, k, value."""
    if df.empty:
        return _empty("pass@k", "no samples for the selected runs")
    fig = go.Figure()
    for run_id, g in df.groupby("run_id", sort=False):
        fig.add_scatter(name=str(run_id), x=g["k"], y=g["value"] * PCT, mode="lines+markers")
    fig.update_layout(title="pass@k over k (micro, unbiased estimator)", xaxis_title="k", yaxis_title="%",
                      xaxis={"dtick": 1}, legend_title="run")
    return fig


def deltas(df: pd.DataFrame, run_a: str, run_b: str) -> go.Figure:
    """Per-data-set difference of average@n (B − A) with paired bootstrap CIs.

    df: dataset, diff, lo, hi (fractions).
    """
    if df.empty:
        return _empty("difference", "the runs share no problems")
    fig = go.Figure(go.Bar(x=df["dataset"], y=df["diff"] * PCT,
                           marker_color=["#2a9d8f" if v >= 0 else "#e76f51" for v in df["diff"]],
                           error_y={"type": "data", "symmetric": False, "array": (df["hi"] - df["diff"]) * PCT,
                                    "arrayminus": (df["diff"] - df["lo"]) * PCT}))
    fig.add_hline(y=0, line_color="gray")
    fig.update_layout(title=f"average@n: {run_b} − {run_a} (paired 95% CI)", yaxis_title="percentage points",
                      xaxis_title="data set")
    return fig


def success_sets(df: pd.DataFrame) -> go.Figure:
    """Stacked counts of problems gained / lost / solved by both / by neither, per data set."""
    if df.empty:
        return _empty("success sets", "the runs share no problems")
    colors = {"gained": "#2a9d8f", "lost": "#e76f51", "both": "#8ab17d", "neither": "#bdbdbd"}
    fig = go.Figure()
    for col in ("gained", "lost", "both", "neither"):
        if col in df:
            fig.add_bar(name=col, x=df["dataset"], y=df[col], marker_color=colors[col])
    fig.update_layout(barmode="stack", title="problems solved (≥ 1 correct sample) by A, B, both, neither",
                      yaxis_title="problems")
    return fig


def success_scatter(df: pd.DataFrame, run_a: str, run_b: str) -> go.Figure:
    """Per-problem success rate of A (x) against B (y), coloured by outcome; jittered slightly."""
    if df.empty:
        return _empty("per-problem success", "the runs share no problems")
    fig = go.Figure()
    for outcome, g in df.groupby("outcome"):
        jitter = ((g.index.to_series() * 2654435761) % 1000 / 1000 - 0.5) * 0.02
        fig.add_scatter(name=str(outcome), x=g["rate_a"] + jitter.values, y=g["rate_b"] - jitter.values,
                        mode="markers", text=g["problem_id"], hovertemplate="%{text}<br>A %{x:.2f}, B %{y:.2f}",
                        marker={"size": 6, "opacity": 0.7})
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "gray"}, showlegend=False)
    fig.update_layout(title="per-problem success rate", xaxis_title=f"A: {run_a}", yaxis_title=f"B: {run_b}",
                      xaxis={"range": [-0.05, 1.05]}, yaxis={"range": [-0.05, 1.05]})
    return fig


def verdict_bars(df: pd.DataFrame) -> go.Figure:
    """Samples per verdict, stacked, per (run, data set). df: run_id, dataset, verdict, samples."""
    if df.empty:
        return _empty("verdicts", "no samples for the selected runs")
    df = df.assign(group=df["run_id"].astype(str) + " · " + df["dataset"].astype(str))
    fig = go.Figure()
    for verdict, g in df.groupby("verdict"):
        fig.add_bar(name=str(verdict), x=g["group"], y=g["samples"])
    fig.update_layout(barmode="stack", title="samples by verdict", yaxis_title="samples", xaxis_title="run · data set")
    return fig


def training_curves(metrics: pd.DataFrame, name: str, evals: pd.DataFrame | None = None) -> go.Figure:
    """One training metric over steps, one line per run; evaluation points (average score) as markers
    on a second axis when ``name`` is a reward/accuracy metric. metrics: run_id, step, name, value."""
    d = metrics[metrics["name"] == name]
    if d.empty:
        return _empty(name, f"no '{name}' values for the selected runs")
    fig = go.Figure()
    for run_id, g in d.groupby("run_id", sort=False):
        fig.add_scatter(name=str(run_id), x=g["step"], y=g["value"], mode="lines")
    if evals is not None and not evals.empty and name.startswith("reward"):
        for (run_id, dataset), g in evals.groupby(["run_id", "dataset"]):
            fig.add_scatter(name=f"{run_id} eval {dataset}", x=g["step"], y=g["average"], mode="markers",
                            marker={"size": 10, "symbol": "diamond"})
    fig.update_layout(title=name, xaxis_title="step", yaxis_title=name, legend_title="run")
    return fig


def segment_weights(tokens: list[str], segments: pd.DataFrame) -> go.Figure:
    """A response's segments as a bar of token spans coloured by ρ (blue < 0 < red), hover shows S.

    segments: start_tok, end_tok, kl_to_go, rho (one response).
    """
    if segments.empty:
        return _empty("segments", "no segments stored for this rollout")
    vmax = max(1e-9, float(segments["rho"].abs().max()))
    fig = go.Figure()
    for s in segments.itertuples(index=False):
        text = "".join(tokens[s.start_tok: s.end_tok + 1])
        fig.add_bar(x=[s.end_tok - s.start_tok + 1], y=["response"], base=[s.start_tok], orientation="h",
                    marker={"color": [s.rho], "colorscale": "RdBu_r", "cmin": -vmax, "cmax": vmax},
                    hovertext=[f"tokens {s.start_tok}-{s.end_tok}: ρ={s.rho:+.3f}, S={s.kl_to_go:.3f}<br>"
                               + _hover_safe(text)], hoverinfo="text", showlegend=False)
    fig.update_layout(title="segments by ρ (blue: negative, red: positive)", xaxis_title="token", barmode="overlay",
                      height=220)
    return fig


def _hover_safe(text: str, limit: int = 120) -> str:
    """Hover text is plotly-markup: escape it so model text shows as text."""
    import html

    text = text if len(text) <= limit else text[:limit] + "…"
    return html.escape(text).replace("\n", "⏎")


def fmt_ci(value: float, lo: float, hi: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{PCT * value:.1f} [{PCT * lo:.1f}, {PCT * hi:.1f}]"


def agreement_matrix(table: pd.DataFrame, ours: str = "ours", theirs: str = "theirs") -> go.Figure:
    """The 2×2 counts of two graders as a heatmap with the counts written in.

    table: columns ``ours`` (correct | wrong), ``theirs`` (correct | wrong), ``samples``.
    """
    if table.empty or int(table["samples"].sum()) == 0:
        return _empty("agreement", "no samples compared")
    order = ["correct", "wrong"]
    z = [[int(table[(table["ours"] == o) & (table["theirs"] == t)]["samples"].sum()) for t in order] for o in order]
    fig = go.Figure(go.Heatmap(z=z, x=[f"{theirs}: {t}" for t in order], y=[f"{ours}: {o}" for o in order],
                               text=[[str(v) for v in row] for row in z], texttemplate="%{text}",
                               colorscale=[[0, "#f1faee"], [1, "#457b9d"]], showscale=False))
    fig.update_layout(title=f"{ours} vs {theirs}", yaxis={"autorange": "reversed"}, height=320)
    return fig
