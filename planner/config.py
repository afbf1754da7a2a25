"""The planner's settings: the candidates file (``--candidates plan.yaml``), SLOs, scratch prices.

Position: planner. The file (all keys optional; every problem is reported at once with
its line, as for fleet.yaml)::

    slo_target: 0.95          # share of a task type's tasks that must succeed within its budgets
    tolerance: 0.10           # the backtest's accepted relative error (CPST, p95 TTFT)
    backtest_seeds: 5         # replays of the current fleet the backtest takes the median of (for a day;
                              # a longer period takes fewer: a week one)
    prefix_sharing: auto      # how the measured hit rate is replayed: common (every call's first blocks) | task
                              # (a task's calls share its context) | auto (task when the rate is near its bound)
    current:                  # what the telemetry cannot tell about the current fleet
      max_num_seqs: 16
      policy: least_loaded
      gateway_retries: 1
      admission: {interactive: 256}
    gpu_types:                # GPU types candidates may use: engine profile, price if not in fleet.yaml
      H100: {profile: h100-llama-3.1-8b}
      L40S: {profile: l40s-llama-3.1-8b, usd_per_gpu_hour: 1.1}
    candidates:               # evaluated as written
      - name: two-h100
        pools: [{gpu_type: H100, count: 2, max_num_seqs: 64}]  # gpu_count (per replica): the profile's
        policy: least_loaded
        gateway_retries: 1
        admission: {interactive: 128, batch: 32}
        autoscale: {min_replicas: 1, target_load_per_replica: 16, cold_start_s: 120}
    search:                   # the planner's own candidates (search.py)
      enabled: true
      budget_s: 600           # wall-clock budget of the whole run
      max_candidates: 20
      max_replicas: 8
      max_num_seqs: [16, 64, 256]
      policies: [least_loaded]
      screen_hours: 24        # a period longer than 1.5x this is searched on its busiest window (0: never)
      finalists: 2            # the window's cheapest candidates meeting every SLO, replayed over the period

Prices of the scratch stores are the store's own ``gpu_prices`` (so a replay is priced exactly as
the measured period), plus ``usd_per_gpu_hour`` of GPU types the store has no price for.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.candidates import Candidate, CandidateError, Pool, profile_for
from serving.emulator.profiles import PROFILES
from serving.emulator.sim_control import AutoscaleRule


class PlanConfigError(ValueError):
    """The candidates file is unreadable or invalid; the message lists every problem with its line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CurrentSpec(_Strict):
    max_num_seqs: int | None = Field(default=None, ge=1)
    policy: str | None = None
    gateway_retries: int | None = Field(default=None, ge=0)
    admission: dict[str, int] | None = None


class GpuTypeSpec(_Strict):
    profile: str
    usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    gpu_count: int = Field(default=1, ge=1)


class PoolSpec(_Strict):
    gpu_type: str
    count: int = Field(ge=0, le=1024)
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_count: int | None = Field(default=None, ge=1)  # None: the engine profile's (GPUs per replica)


class AutoscaleSpec(_Strict):
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int | None = Field(default=None, ge=1)
    target_load_per_replica: float = Field(default=8.0, gt=0)
    interval_s: float = Field(default=60.0, gt=0)
    cold_start_s: float = Field(default=120.0, ge=0)
    scale_down_after_s: float = Field(default=300.0, ge=0)


class CandidateSpec(_Strict):
    name: str = Field(min_length=1, max_length=80)
    pools: list[PoolSpec] = Field(min_length=1)
    policy: str = "least_loaded"
    gateway_retries: int = Field(default=1, ge=0)
    admission: dict[str, int] | None = None
    autoscale: AutoscaleSpec | None = None


class SearchSpec(_Strict):
    enabled: bool = True
    budget_s: float = Field(default=600.0, gt=0)
    max_candidates: int = Field(default=20, ge=1, le=500)
    max_replicas: int = Field(default=8, ge=1, le=256)
    max_num_seqs: list[int] = Field(default_factory=lambda: [16, 64, 256])
    policies: list[str] = Field(default_factory=lambda: ["least_loaded"])
    screen_hours: float = Field(default=24.0, ge=0, le=24 * 31)
    finalists: int = Field(default=2, ge=1, le=20)


class PlanConfig(_Strict):
    slo_target: float = Field(default=0.95, gt=0, le=1)
    tolerance: float = Field(default=0.10, gt=0, lt=1)
    backtest_seeds: int = Field(default=5, ge=1, le=9)
    prefix_sharing: Literal["auto", "common", "task"] = "auto"
    current: CurrentSpec = Field(default_factory=CurrentSpec)
    gpu_types: dict[str, GpuTypeSpec] = Field(default_factory=dict)
    candidates: list[CandidateSpec] = Field(default_factory=list)
    search: SearchSpec = Field(default_factory=SearchSpec)

    def profiles(self) -> dict[str, str]:
        return {name: spec.profile for name, spec in self.gpu_types.items()}

    def user_candidates(self, model: str) -> list[Candidate]:
        """The file's candidates; raises PlanConfigError naming each one that cannot run."""
        out, problems = [], []
        for spec in self.candidates:
            try:
                profiles = [profile_for(p.gpu_type, p.gpu_count, model, self.profiles()) for p in spec.pools]
                pools = tuple(Pool(p.gpu_type, p.count, prof, PROFILES[prof].gpu_count if p.gpu_count is None
                                   else p.gpu_count, p.max_num_seqs) for p, prof in zip(spec.pools, profiles))
                scale = AutoscaleRule(**spec.autoscale.model_dump()) if spec.autoscale else None
                out.append(Candidate(spec.name, pools, spec.policy, spec.gateway_retries,
                                     tuple(sorted(spec.admission.items())) if spec.admission else None, scale,
                                     origin="user"))
            except CandidateError as exc:
                problems.append(str(exc))
        if problems:
            raise PlanConfigError("invalid candidates:\n  " + "\n  ".join(problems))
        return out


def parse_plan_config(text: str, source: str = "plan.yaml") -> PlanConfig:
    """Parse and validate the candidates file; an empty file means every default.

    Raises PlanConfigError (``<source>:<line>: <path>: <message>``, every problem at once)."""
    from schema.fleet import validate_yaml

    return validate_yaml(text, source, PlanConfig, PlanConfigError, what="candidates file",
                         keys="candidates:, search:, current:, gpu_types:, ...")


def load_plan_config(path: str | Path | None) -> PlanConfig:
    """Read the candidates file; None = defaults. Raises PlanConfigError."""
    if path is None:
        return PlanConfig()
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanConfigError(f"cannot read candidates file {path}: {exc.strerror or exc}") from exc
    return parse_plan_config(text, str(path))


def slos_from_fleet_file(path: str | Path) -> dict[str, tuple[float | None, float | None]]:
    """``slos:`` of a fleet.yaml as task type -> (ttft_ms, e2e_ms). Raises FleetError."""
    from schema.fleet import load_fleet

    fleet = load_fleet(path)
    return {t: (s.ttft_ms, s.e2e_ms) for t, s in fleet.slos.items()}


def fleet_base(store, config: PlanConfig, slos: dict, now: datetime | None = None) -> dict:
    """The fleet.yaml content (a dict for ``schema.fleet.Fleet``) every scratch store is synced with,
    replicas aside: the store's prices and cost settings, extra prices from ``config``, ``slos``.

    Raises PlanConfigError when a GPU type of ``config`` has no price anywhere."""
    from schema.queries import planner as pq

    gpu_types: dict[str, dict] = {}
    for row in pq.gpu_prices(store).itertuples(index=False):
        valid_from = row.valid_from.to_pydatetime() if hasattr(row.valid_from, "to_pydatetime") else row.valid_from
        gpu_types.setdefault(row.gpu_type, {"prices": []})["prices"].append(
            {"usd_per_gpu_hour": float(row.usd_per_gpu_hour), "valid_from": valid_from.replace(tzinfo=None)})
    missing = []
    for name, spec in config.gpu_types.items():
        if name not in gpu_types:
            if spec.usd_per_gpu_hour is None:
                missing.append(name)
            else:
                gpu_types[name] = {"prices": [{"usd_per_gpu_hour": spec.usd_per_gpu_hour}]}
    if missing:
        raise PlanConfigError(f"no price for GPU type(s) {', '.join(missing)}: add usd_per_gpu_hour under gpu_types: "
                              f"in the candidates file, or the type to fleet.yaml")
    if not gpu_types:
        raise PlanConfigError("the store has no GPU prices (sync a fleet.yaml first) and the candidates file names none")
    base: dict = {"gpu_types": gpu_types,
                  "slos": {t: {"ttft_ms": a, "e2e_ms": b} for t, (a, b) in slos.items() if a or b}}
    settings = pq.cost_settings(store)
    if len(settings):
        s = settings.iloc[0]
        base["allocation"] = {"w_prefill": float(s["w_prefill"]), "w_decode": float(s["w_decode"])}
        base["abandon_timeout_s"] = int(s["abandon_timeout_s"])
        base["jobs"] = {"window_s": int(s["job_window_s"]), "max_call_s": int(s["max_call_s"]),
                        "task_lookback_s": int(s["task_lookback_s"])}
        if s["default_gpu_type"] in gpu_types:
            base["unknown_replica"] = {"gpu_type": s["default_gpu_type"], "gpu_count": int(s["default_gpu_count"])}
    return base
