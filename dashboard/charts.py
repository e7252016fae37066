"""Pure ``DataFrame → plotly Figure`` functions for the dashboard (tested without a browser).

Model and dataset text never reaches a chart as markup: labels are run ids, data-set names and
problem ids, and plotly renders trace text as text.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

PCT = 100.0

RUN_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442")
"""One colour per run, in the order the runs are drawn (Okabe–Ito: distinguishable, also colour-blind): two runs
never get two blues, and a run keeps its colour on every chart of a page."""

VERDICT_COLORS = {"correct": "#2a9d8f", "wrong": "#e76f51", "no_answer": "#e9c46a", "timeout": "#8d99ae",
                  "gold_unparsable": "#6d597a", "error": "#264653"}
"""One colour per verdict (``prl.grading.verifier.VERDICTS``, tested equal), the same in every store and chart."""


def run_colors(run_ids) -> dict[str, str]:
    """``run_id → colour``, in the given order (cycling past eight runs)."""
    return {r: RUN_COLORS[i % len(RUN_COLORS)] for i, r in enumerate(dict.fromkeys(map(str, run_ids)))}


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
    colors = run_colors(d["run_id"])
    ks = sorted(set(int(k) for k in d["k"])) if "k" in d else []
    for run_id, g in d.groupby("run_id", sort=False):
        name = str(run_id) if len(ks) <= 1 else f"{run_id} ({metric}@{int(g['k'].iloc[0])})"
        fig.add_bar(name=name, x=g["dataset"], y=g["value"] * PCT, marker_color=colors[str(run_id)],
                    error_y={"type": "data", "symmetric": False, "array": (g["hi"] - g["value"]) * PCT,
                             "arrayminus": (g["value"] - g["lo"]) * PCT})
    shown = (f"{metric}@{ks[0]}" if len(ks) == 1 else "average@n (each run's own n)" if metric == "average"
             else f"{metric}@k (k clipped to each run's n)")
    fig.update_layout(barmode="group", title=title or f"{shown} by data set (95% bootstrap CI)",
                      yaxis_title="%", xaxis_title="data set", legend_title="run")
    return fig


def pass_at_k_curve(df: pd.DataFrame) -> go.Figure:
    """pass@k (micro) against k, one line per run. df: run_id, k, value."""
    if df.empty:
        return _empty("pass@k", "no samples for the selected runs")
    fig = go.Figure()
    colors = run_colors(df["run_id"])
    for run_id, g in df.groupby("run_id", sort=False):
        fig.add_scatter(name=str(run_id), x=g["k"], y=g["value"] * PCT, mode="lines+markers",
                        line={"color": colors[str(run_id)]})
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
    """The share of each verdict among the samples of each (run, data set), stacked to 100 %, so that a data set of
    1,600 samples and one of 40 read alike; the counts are in the hover. df: run_id, dataset, verdict, samples."""
    if df.empty:
        return _empty("verdicts", "no samples for the selected runs")
    df = df.assign(group=df["run_id"].astype(str) + " · " + df["dataset"].astype(str))
    totals = df.groupby("group")["samples"].transform("sum")
    df = df.assign(share=df["samples"] / totals * PCT, total=totals)
    groups = list(dict.fromkeys(df["group"]))
    fig = go.Figure()
    order = [v for v in VERDICT_COLORS if v in set(df["verdict"])] + sorted(set(df["verdict"]) - set(VERDICT_COLORS))
    for verdict in order:
        g = df[df["verdict"] == verdict]
        fig.add_bar(name=str(verdict), x=g["group"], y=g["share"], marker_color=VERDICT_COLORS.get(verdict, "#999999"),
                    customdata=list(zip(g["samples"], g["total"])),
                    hovertemplate="%{x}<br>" + str(verdict) + ": %{y:.1f}% (%{customdata[0]} of %{customdata[1]})"
                                  "<extra></extra>")
    fig.update_layout(barmode="stack", title="verdicts: share of each (run, data set)'s samples", yaxis_title="% of samples",
                      xaxis_title="run · data set", yaxis={"range": [0, 100]},
                      xaxis={"categoryorder": "array", "categoryarray": groups})
    return fig


def training_curves(metrics: pd.DataFrame, name: str, evals: pd.DataFrame | None = None,
                    colors: dict[str, str] | None = None, alerts: pd.DataFrame | None = None) -> go.Figure:
    """One training metric over steps, one line per run (its colour from ``colors``, else :func:`run_colors`);
    evaluation points (average score per data set) as markers of the same colour when ``name`` is a
    reward/accuracy metric; each alert of the runs' monitors (``alerts``: run_id, step, monitor) as a dashed
    vertical line in the run's colour, labelled by the monitor. metrics: run_id, step, name, value."""
    d = metrics[metrics["name"] == name]
    if d.empty:
        return _empty(name, f"no '{name}' values for the selected runs")
    colors = colors or run_colors(metrics["run_id"])
    fig = go.Figure()
    for run_id, g in d.groupby("run_id", sort=False):
        fig.add_scatter(name=str(run_id), x=g["step"], y=g["value"], mode="lines",
                        line={"color": colors.get(str(run_id))})
    if evals is not None and not evals.empty and name.startswith("reward"):
        symbols = ("diamond", "square", "triangle-up", "circle", "x", "star")
        for i, ((run_id, dataset), g) in enumerate(evals.groupby(["run_id", "dataset"])):
            fig.add_scatter(name=f"{run_id} eval {dataset}", x=g["step"], y=g["average"], mode="markers",
                            marker={"size": 10, "symbol": symbols[i % len(symbols)], "color": colors.get(str(run_id)),
                                    "line": {"width": 1, "color": "white"}})
    _alert_lines(fig, alerts, colors)
    fig.update_layout(title=name, xaxis_title="step", yaxis_title=name, legend_title="run")
    return fig


def _alert_lines(fig: go.Figure, alerts: pd.DataFrame | None, colors: dict[str, str]) -> None:
    if alerts is None or alerts.empty:
        return
    for a in alerts.itertuples(index=False):
        fig.add_vline(x=int(a.step), line_dash="dash", line_width=1, line_color=colors.get(str(a.run_id), "red"),
                      annotation_text=_hover_safe(str(a.monitor), 30), annotation_textangle=-90,
                      annotation_position="top left")


def pass_at_k_curves(metrics: pd.DataFrame, colors: dict[str, str] | None = None,
                     alerts: pd.DataFrame | None = None) -> go.Figure:
    """Unbiased pass@k of the evaluations during training (``eval/pass@k``, micro average over problems) over
    steps: one line per run and k (the run's colour, a marker per k), with the alerts' lines."""
    d = metrics[metrics["name"].str.fullmatch(r"eval/pass@\d+")]
    if d.empty:
        return _empty("pass@k during training", "no evaluation during training stored pass@k (train.eval_every)")
    colors = colors or run_colors(metrics["run_id"])
    symbols = ("circle", "diamond", "square", "triangle-up", "x", "star")
    fig = go.Figure()
    ks = sorted({int(n.split("@")[1]) for n in d["name"]})
    for run_id, g in d.groupby("run_id", sort=False):
        for i, k in enumerate(ks):
            gk = g[g["name"] == f"eval/pass@{k}"].sort_values("step")
            fig.add_scatter(name=f"{run_id} pass@{k}", x=gk["step"], y=gk["value"], mode="lines+markers",
                            line={"color": colors.get(str(run_id))}, marker={"symbol": symbols[i % len(symbols)],
                                                                             "size": 8})
    _alert_lines(fig, alerts, colors)
    fig.update_layout(title="pass@k during training (unbiased, micro average)", xaxis_title="step",
                      yaxis_title="pass@k", yaxis_range=[0, 1], legend_title="run, k")
    return fig


def segment_weights(tokens: list[str], segments: pd.DataFrame) -> go.Figure:
    """Where the weight went in one response: a bar per segment (top to bottom in the order of the response),
    labelled by the segment's own text, of length ρ and coloured by ρ on a diverging scale (blue < 0 < red) with
    a ρ colour bar; the hover shows the token span, S (the KL to go at its boundary) and the text.

    segments: start_tok, end_tok, kl_to_go, rho (one response); tokens: the decoded text of each token.
    """
    if segments.empty:
        return _empty("segments", "no segments stored for this rollout")
    segs = segments.sort_values("start_tok")
    vmax = max(1e-9, float(segs["rho"].abs().max()))
    labels, hovers = [], []
    for i, s in enumerate(segs.itertuples(index=False)):
        text = "".join(tokens[s.start_tok: s.end_tok + 1])
        short = " ".join(text.split())
        short = short if len(short) <= 40 else short[:39] + "…"
        labels.append(f"{i}: {_hover_safe(short or '(blank)', 60)}")
        hovers.append(f"segment {i}, tokens {s.start_tok}–{s.end_tok}<br>ρ = {s.rho:+.3f}, S = {s.kl_to_go:.3f}<br>"
                      + _hover_safe(text, 300))
    fig = go.Figure(go.Bar(
        x=segs["rho"], y=labels, orientation="h", hovertext=hovers, hoverinfo="text",
        marker={"color": segs["rho"], "colorscale": "RdBu_r", "cmin": -vmax, "cmax": vmax,
                "colorbar": {"title": {"text": "ρ"}, "thickness": 12}}))
    fig.add_vline(x=0, line_color="gray")
    fig.update_layout(title="segments by ρ (the weight of each step in the advantage)", xaxis_title="ρ",
                      yaxis={"autorange": "reversed", "type": "category", "automargin": True},
                      height=min(1600, 200 + 28 * len(segs)), margin={"l": 10, "t": 50, "b": 50},
                      bargap=0.25)
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
