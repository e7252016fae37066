"""Training: curves of the training metrics per run with several runs overlaid (one distinct colour
per run, its evaluation points in the same colour) on the same step axis; the inspected rollouts of a
step with each segment's text and its ρ. Deep link: ``?run=…&step=…`` (the Runs page links evaluations
made during training here)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import charts, data, ui  # noqa: E402

import json  # noqa: E402

st.title("Training")

DEFAULT = ["reward/mean", "reward/accuracy", "actor/kl_ref", "actor/entropy", "actor/clipfrac", "response/length",
           "prl/rho_mean", "prl/rho_std", "time/step"]


LIVE_S = 10


def curves(run_ids: list[str], shown: list[str], live: bool) -> None:
    """The curves and the evaluation points; redrawn on its own every LIVE_S seconds when following."""
    @st.fragment(run_every=LIVE_S if live else None, key=ui.key("training", "live_curves"))
    def draw() -> None:
        metrics = ui.train_metrics(ui.db(), run_ids)
        evals = ui.eval_points(ui.db(), run_ids)
        alerts = ui.train_alerts(ui.db(), run_ids)
        colors = charts.run_colors(run_ids)
        if not alerts.empty:
            st.subheader("Alerts")
            st.caption("What the runs' monitors fired (docs/architecture.md §Runs that say when they go wrong); "
                       "each is a dashed line on the curves below.")
            st.dataframe(alerts, hide_index=True, width="stretch", key=ui.key("training", "alerts", run_ids))
        cols = st.columns(2)
        for i, name in enumerate(shown):
            cols[i % 2].plotly_chart(charts.training_curves(metrics, name, evals, colors, alerts), width="stretch",
                                     key=ui.key("training", "curve", name, run_ids))
        if not evals.empty:
            st.subheader("Evaluations during training")
            st.plotly_chart(charts.pass_at_k_curves(metrics, colors, alerts), width="stretch",
                            key=ui.key("training", "pass_at_k", run_ids))
            st.dataframe(evals, hide_index=True, width="stretch", key=ui.key("training", "evals", run_ids))

    draw()


def body() -> None:
    df = ui.all_runs()
    if df is None:
        return
    choices = df[df["kind"] == data.TRAIN]["run_id"].tolist()
    if not choices:
        st.info("No training runs yet (`prl train --config …`).")
        return
    linked = st.query_params.get("run")
    runs_key = ui.key("training", "runs")
    if linked in choices and st.session_state.get(f"{runs_key}/linked") != linked:
        st.session_state[runs_key] = list(dict.fromkeys([linked, *st.session_state.get(runs_key, [])]))
        st.session_state[f"{runs_key}/linked"] = linked
        st.session_state[ui.key("training", "rollout_run")] = linked
    elif runs_key not in st.session_state:
        st.session_state[runs_key] = choices[-2:]
    run_ids = st.multiselect("training runs", choices, key=runs_key)
    if not run_ids:
        return
    metrics = ui.train_metrics(ui.db(), run_ids)
    if metrics.empty:
        st.info("The selected runs have no finished steps yet.")
        return
    names = sorted(metrics["name"].unique())
    shown = st.multiselect("metrics", names, default=[n for n in DEFAULT if n in names],
                           key=ui.key("training", "metrics"))
    ui.math_toggle()
    live = st.toggle(f"follow the runs (redraw every {LIVE_S} s: new steps, and evaluation points as the "
                     "evaluate-checkpoint deployment stores them)", key=ui.key("training", "live"))
    curves(run_ids, shown, live)
    st.subheader("Where the weight went: segments of inspected rollouts")
    run_id = st.selectbox("run", run_ids, key=ui.key("training", "rollout_run"))
    steps = ui.rollout_steps(ui.db(), run_id)
    if not steps:
        st.info("No rollouts were stored for this run.")
        return
    step_key = ui.key("training", "step", run_id)
    wanted = st.query_params.get("step")
    if run_id == linked and wanted and wanted.isdigit() and st.session_state.get(f"{step_key}/linked") != wanted:
        near = min(steps, key=lambda s: abs(s - int(wanted)))  # the inspected step nearest the linked one
        st.session_state[step_key] = near
        st.session_state[f"{step_key}/linked"] = wanted
        if near != int(wanted):
            st.caption(f"No rollouts were stored at step {wanted}; showing step {near}, the nearest.")
    if st.session_state.get(step_key) not in steps:
        st.session_state[step_key] = steps[-1]
    step = st.select_slider("step", steps, key=step_key)
    ro, segs = ui.rollouts(ui.db(), run_id, step)
    for r in ro.itertuples(index=False):
        # keyed by run, step and rollout index: a model that repeats itself gives identical rollouts
        rollout = ("training", "rollout", run_id, step, r.rollout_idx)
        with st.expander(f"rollout {r.rollout_idx} · reward {r.reward:g}", expanded=r.rollout_idx == 0,
                         key=ui.key(*rollout)):
            ui.show_text("problem", r.problem, key=ui.key(*rollout, "problem"))
            ui.show_text("response", r.response, key=ui.key(*rollout, "response"))
            tokens = json.loads(r.tokens) if isinstance(r.tokens, str) else list(r.tokens or [])
            st.plotly_chart(charts.segment_weights(tokens, segs[segs["rollout_idx"] == r.rollout_idx]),
                            width="stretch", key=ui.key(*rollout, "segments"))


ui.guard(body)
