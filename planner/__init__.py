"""The capacity and cost planner: replay a measured period's task workload on candidate fleets and
policies in virtual time, run the cost jobs on each replay, and recommend the cheapest fleet that
meets every SLO (``infercost plan``).

Position: ``infercost/`` is the wiring package, the only one allowed to import every layer; the
planner reads the store (named queries in ``schema/queries/planner_*.sql``), drives the serving
simulator (``serving/emulator/fleet_sim.py``) and runs the cost jobs (``schema.jobs.run_jobs``) on
scratch stores.

| module | owns |
|---|---|
| ``workload.py`` | the ``Workload`` (task plans of a period), plans from the store's frames, resampling |
| ``extract.py`` | reading the workload, client retry behaviour and gateway settings from the store |
| ``incidents.py`` | the period's incidents (slowed, crashed replicas) as a fault timeline, or minutes to exclude |
| ``backtest.py`` | the backtest's figures per task type and hour, the verdict and why a figure is missed |
| ``candidates.py`` | ``Candidate`` / ``Pool``, engine profiles per GPU type, the current fleet |
| ``config.py`` | the candidates file (plan.yaml), SLOs, the scratch stores' fleet config |
| ``evaluate.py`` | one candidate end to end in a scratch store: simulate, ingest, cost jobs, read |
| ``pool.py`` | worker processes with their own scratch stores, progress bar with ETA |
| ``melange.py`` | GPU mix by request-size buckets (profiled rates + ILP), as Mélange |
| ``search.py`` | the levers, local search, the time budget |
| ``report.py`` | backtest, Pareto frontier, recommendation, levers, the text report |
| ``run.py`` | ``plan()``: the whole run |
| ``results.py`` | storing a run (tables of ``schema/migrations/1008_baseline_planner.sql``) |
"""
