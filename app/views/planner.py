"""Page: the capacity and cost planner's runs (``infercost plan``): backtest, recommendation,
frontier chart, candidate table, SLOs per task type, levers, assumptions.

Data: the planner's stored results through ``schema.queries.planner`` (``runs``, ``run``,
``run_candidates``, ``run_task_types``; tables of ``schema/migrations/1008_baseline_planner.sql``).
``?run=<id>`` selects a run.
The page runs nothing itself: a run replays a week on ~20 fleets and takes minutes.
"""

from __future__ import annotations

import json

import altair as alt
import pandas as pd
import streamlit as st

from app import fmt, ui
from schema.store import StoreError

st.title("Capacity and cost planner")
HINT = ("Run `infercost plan --since 7d` (optionally `--candidates plan.yaml --slo-from fleet.yaml`): it replays "
        "the measured workload on candidate fleets in virtual time, runs the cost jobs on each, and stores the "
        "run here.")

try:
    runs = ui.query("schema.queries.planner:runs", 50)
except StoreError as exc:
    if "planner_runs" in str(exc):
        ui.empty_state("The planner's tables do not exist yet.", "Run `infercost migrate`. " + HINT)
        st.stop()
    ui.store_error(exc)
    st.stop()
if not len(runs):
    ui.empty_state("No planner run yet.", HINT)
    st.stop()

labels = {r.run_id: f"{ui.local_time(r.created_at.to_pydatetime(), '%Y-%m-%d %H:%M')} · "
                    f"{r.period_start:%Y-%m-%d} .. {r.period_end:%Y-%m-%d} · {r.status} · {r.run_id}"
          for r in runs.itertuples(index=False)}
ids = list(labels)
wanted = st.query_params.get("run")
run_id = st.selectbox("Run", ids, index=ids.index(wanted) if wanted in ids else 0, format_func=labels.get,
                      key="planner_run")
st.query_params["run"] = run_id
run = ui.query("schema.queries.planner:run", run_id).iloc[0]
cands = ui.query("schema.queries.planner:run_candidates", run_id)
types = ui.query("schema.queries.planner:run_task_types", run_id)
assumptions = json.loads(run["assumptions"] or "{}")
workload = json.loads(run["workload"] or "{}")
levers = json.loads(run["levers"] or "[]")

st.caption(f"Replayed {run['period_start']:%Y-%m-%d %H:%M} – {run['period_end']:%Y-%m-%d %H:%M} UTC: "
           f"{workload.get('tasks', 0):,} tasks, {workload.get('calls', 0):,} calls; {int(run['candidates'])} "
           f"candidates in {fmt.seconds(run['wall_seconds'])}. Money is USD over that period.")
screened, screen = assumptions.get("screened") or [], assumptions.get("screen") or {}
if screened:
    day_from, day_to = (screen.get(k, "")[:16].replace("T", " ") for k in ("start", "end"))
    st.caption(f"{len(screened)} candidates were compared on the busiest day ({day_from} – {day_to} UTC, "
               f"{screen.get('tasks', 0):,} tasks); the cheapest meeting every SLO there were replayed over the "
               f"whole period, and only those are below. The levers' figures are the busiest day's.")

# 1. The backtest comes first: a planner that cannot reproduce the past cannot predict.
st.subheader("Backtest")
tol = float(run["tolerance"] or 0.1)


def _error(replayed, measured) -> str | None:
    if pd.isna(replayed) or pd.isna(measured) or not measured:
        return None
    return f"{(replayed - measured) / measured * 100:+.1f} % (±{tol * 100:.0f} %)"


b1, b2, b3, b4 = st.columns(4)
b1.metric("CPST measured", fmt.usd(run["measured_cpst_usd"]), border=True)
b2.metric("CPST replayed", fmt.usd(run["replayed_cpst_usd"]), border=True, delta_color="off",
          delta=_error(run["replayed_cpst_usd"], run["measured_cpst_usd"]))
b3.metric("p95 TTFT measured", fmt.seconds(run["measured_ttft_p95_s"]), border=True)
b4.metric("p95 TTFT replayed", fmt.seconds(run["replayed_ttft_p95_s"]), border=True, delta_color="off",
          delta=_error(run["replayed_ttft_p95_s"], run["measured_ttft_p95_s"]))
if int(run["backtest_passed"]):
    st.success("The current fleet replayed on its own period reproduces the measured CPST and p95 TTFT.",
               icon=":material/check_circle:")
else:
    st.error("Backtest failed: nothing is recommended. " + fmt.md_escape(run["message"]), icon=":material/error:")
    for line in assumptions.get("diagnosis", []):  # the replay's own figures per hour
        st.caption(line)

# 2. The recommendation.
st.subheader("Recommendation")
if run["status"] == "recommended":
    r1, r2, r3 = st.columns(3)
    rec = cands[cands["recommended"] == 1].iloc[0]
    cur = cands[cands["is_current"] == 1]
    r1.metric("Recommended", fmt.md_escape(run["recommended_candidate"]), border=True)
    r2.metric("CPST", fmt.usd(rec["cpst_usd"]),
              delta=fmt.usd(rec["cpst_usd"] - cur["cpst_usd"].iloc[0], signed=True) if len(cur) else None,
              delta_color="inverse", border=True)
    r3.metric("Predicted saving", fmt.pct(run["predicted_saving_ratio"]),
              delta=f"{fmt.usd(run['predicted_saving_usd'])} over the period", delta_color="off", border=True)
    st.info(fmt.md_escape(run["message"]), icon=":material/recommend:")
elif run["status"] == "backtest_failed":  # the backtest's box above carries the message
    st.warning("None: the backtest above failed, so the replay cannot be trusted to predict.", icon=":material/info:")
else:
    st.warning(fmt.md_escape(run["message"] or "No recommendation."), icon=":material/info:")

if len(cands):
    # 3. Frontier: CPST vs p95 TTFT, size = goodput; the line joins the Pareto-optimal candidates.
    st.subheader("Frontier")
    pts = cands.copy()
    pts["fleet"] = [json.loads(s).get("label", "") for s in pts["spec"]]
    pts["kind"] = ["recommended" if r else "current" if c else "meets every SLO" if m else "misses an SLO"
                   for r, c, m in zip(pts["recommended"], pts["is_current"], pts["meets_slo"])]
    # drawn last = on top: the recommended and current points stay visible over equal candidates
    pts["order"] = pts["kind"].map({"recommended": 3, "current": 2}).fillna(0)
    pts = pts.dropna(subset=["cpst_usd", "ttft_p95_s"]).sort_values("order")
    tooltip = [alt.Tooltip("candidate:N"), alt.Tooltip("fleet:N"), alt.Tooltip("cpst_usd:Q", title="CPST", format="$.4f"),
               alt.Tooltip("ttft_p95_s:Q", title="p95 TTFT (s)", format=".3f"),
               alt.Tooltip("goodput_per_hour:Q", title="goodput (tasks/h)", format=",.1f"),
               alt.Tooltip("slo_attainment_min:Q", title="worst SLO attainment", format=".1%")]
    base = alt.Chart(pts).encode(x=alt.X("ttft_p95_s:Q", title="p95 TTFT (s)"),
                                 y=alt.Y("cpst_usd:Q", title="cost per successful task (USD)"))
    colors = alt.Scale(domain=["recommended", "current", "meets every SLO", "misses an SLO"],
                       range=["#1a9850", "#000000", "#74add1", "#d73027"])
    points = base.mark_circle(opacity=0.8, stroke="white", strokeWidth=0.5).encode(
        color=alt.Color("kind:N", title="", scale=colors),
        size=alt.Size("goodput_per_hour:Q", title="goodput (tasks/h)", scale=alt.Scale(range=[60, 600])),
        tooltip=tooltip)
    line = alt.Chart(pts[pts["on_frontier"] == 1].sort_values("ttft_p95_s")).mark_line(
        strokeDash=[4, 3], color="gray").encode(x="ttft_p95_s:Q", y="cpst_usd:Q")
    text = base.transform_filter(alt.FieldOneOfPredicate("kind", ["recommended", "current"])).mark_text(
        dx=10, dy=-10, align="left", fontWeight="bold").encode(text="candidate:N")
    ui.chart((line + points + text).properties(height=380), width="stretch")
    st.caption("Pareto frontier in (CPST, p95 TTFT, goodput): no other candidate is cheaper, faster and with more "
               "goodput at once.")

    # 4. Candidate table.
    st.subheader("Candidates")
    show = cands.copy()
    show.insert(1, "fleet", [json.loads(s).get("label", "") for s in show["spec"]])
    show = show.drop(columns=["spec"])
    for col in ("is_current", "meets_slo", "on_frontier", "recommended"):
        show[col] = show[col].astype(bool)
    ui.table(show, "planner_candidates", f"planner-{run_id}-candidates.csv", column_config={
        "spend_usd": st.column_config.NumberColumn("spend", format="$%,.2f"),
        "cpst_usd": st.column_config.NumberColumn("CPST", format="$%,.4f"),
        "attributed_cpst_usd": st.column_config.NumberColumn("attributed CPST", format="$%,.4f"),
        "idle_ratio": st.column_config.NumberColumn("idle", format="percent"),
        "goodput_per_hour": st.column_config.NumberColumn("goodput/h", format="%.1f"),
        "ttft_p95_s": st.column_config.NumberColumn("p95 TTFT (s)", format="%.3f"),
        "e2e_p95_s": st.column_config.NumberColumn("p95 e2e (s)", format="%.1f"),
        "slo_attainment_min": st.column_config.NumberColumn("worst SLO attainment", format="percent")})

    # 5. Per task type vs SLO, for one candidate.
    st.subheader("SLOs per task type")
    default = run["recommended_candidate"] or run["current_candidate"]
    names = list(cands["candidate"])
    pick = st.selectbox("Candidate", names, index=names.index(default) if default in names else 0,
                        key="planner_types_candidate")
    sel = types[types["candidate"] == pick].drop(columns=["candidate"]).copy()
    sel["meets_slo"] = sel["meets_slo"].astype(bool)
    ui.table(sel, "planner_types", f"planner-{run_id}-{pick}-slos.csv", column_config={
        "slo_attainment": st.column_config.NumberColumn("SLO attainment", format="percent"),
        "ttft_p95_s": st.column_config.NumberColumn("p95 TTFT (s)", format="%.3f"),
        "e2e_p95_s": st.column_config.NumberColumn("p95 e2e (s)", format="%.1f")})

# 6. Levers: each of the four moves as a planner candidate, with predicted saving and risk.
if levers:
    st.subheader("Levers")
    rows = [{"move": lv["title"], "saving": fmt.pct(lv.get("saving_ratio")),
             ("saving (USD, busiest day)" if screened else "saving (USD, period)"): fmt.usd(lv.get("saving_usd")),
             "risk": (lv.get("risk") or {}).get("level", "—"),
             "worst SLO margin": fmt.pct((lv.get("risk") or {}).get("slo_margin"), signed=True),
             "candidate": lv.get("candidate") or "—", "fleet": lv.get("label") or lv.get("note")} for lv in levers]
    ui.table(pd.DataFrame(rows), "planner_levers", f"planner-{run_id}-levers.csv")

with st.expander("Assumptions (profiles and their sources, inferred settings)"):
    for key, value in assumptions.items():
        if key in ("diagnosis", "melange", "screen", "screened"):
            continue
        st.markdown(f"**{fmt.md_escape(key)}**: {fmt.md_escape(value)}")
    if workload.get("hourly_tasks"):
        st.caption("Tasks per hour of the replayed period (the diurnal shape the replay keeps):")
        st.bar_chart(pd.DataFrame({"tasks": workload["hourly_tasks"]}), height=160)
