"""The fleet config (``fleet.yaml``): GPU prices, replica inventory, allocation weights, SLOs.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. :func:`load_fleet`
parses and validates the file (pydantic; every problem reported at once, each with its line
number); :func:`sync_fleet` writes it into ``gpu_prices``, ``replicas``, ``task_slos`` and
``cost_settings``, which the cost jobs read at run time (so a new price re-prices every minute the
jobs recompute; history before the trailing window needs ``infercost cost --recompute``).

Defaults and their sources:

* ``w_prefill`` = 0.25, ``w_decode`` = 1.0 work units per token. Allocation shares a
  replica-minute's spend by the GPU time each call used, so the ratio of the weights is the ratio
  of GPU time per token. Prefill is compute-bound: ~0.15-0.30 ms per prompt token on an H100 for
  Llama-3-8B, batching does not make it cheaper per token (shared/reference/vllm-telemetry.md,
  "Calibration numbers"). Decode is memory-bound: ~13 ms per step at batch 1, but a step serves
  the whole running batch; at the batch of 8 of vLLM's CI figure (6.5 ms per step) a decode token
  costs ~0.8 ms. Prefill / decode per token = 0.225 / 0.81 ~ 0.28, rounded to 0.25. At batch 1
  the ratio would be ~0.017 (decode ~58x costlier); a fleet that runs mostly unbatched should set
  ``w_prefill`` near 0.02.
* ``abandon_timeout_s`` = 1800: a task whose root span has not arrived 30 min after its last
  call is abandoned (must stay below the jobs' trailing window minus 10 min, so the verdict is
  reached while the task's minutes are still recomputed).
* ``unknown_replica``: H100 x 1 (the first listed GPU type when there is no H100) — a replica seen
  in telemetry but missing here is priced as one GPU of that type and flagged
  (``replica_minutes.in_fleet`` = 0).
* ``jobs.window_s`` = 7200 (the 2 h trailing window each run recomputes: late spans inside it are
  absorbed), ``jobs.max_call_s`` = 3600 (the longest call a window looks back for),
  ``jobs.task_lookback_s`` = 86400 (how far back a task's calls are summed).
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schema.jobs import JOBS_DIR, sql_statements

_REPLICA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")


class FleetError(ValueError):
    """fleet.yaml is unreadable or invalid; the message lists every problem with its line."""


def _utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    else:
        raise ValueError(f"expected a date or an ISO 8601 timestamp, got {value!r}")
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt.replace(microsecond=0)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Price(_Strict):
    """One price of a GPU type: USD per GPU-hour from ``valid_from`` (UTC) on."""

    usd_per_gpu_hour: float = Field(ge=0, description="USD per GPU per hour")
    valid_from: datetime = Field(default=datetime(1970, 1, 1), description="UTC; a date means its midnight")

    @field_validator("valid_from", mode="before")
    @classmethod
    def _valid_from(cls, value):
        return _utc(value)

    @field_validator("usd_per_gpu_hour")
    @classmethod
    def _finite(cls, value):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class GpuType(_Strict):
    """A GPU model and its versioned prices."""

    prices: list[Price] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self):
        seen = [p.valid_from for p in self.prices]
        if len(seen) != len(set(seen)):
            raise ValueError("two prices have the same valid_from")
        return self


class Replica(_Strict):
    """A replica: its GPU type (a key of ``gpu_types``), GPU count (tensor-parallel size), billing
    mode and, optionally, its capacity.

    billing: ``on_demand`` (paid for the minutes it is up: a successful scrape or work) or
    ``reserved`` (paid every minute whether up or not: idle and down time are visible waste).
    capacity: the work units per minute it sustains (``w_prefill`` x uncached prompt tokens +
    ``w_decode`` x output tokens at full load); a minute allocates spend x min(1, work / capacity)
    to its calls and the rest is idle. Omitted: learned by the cost job from the replica's own
    saturated minutes (median work of minutes in which requests waited for capacity, over 7
    days, at least 3 of them), else its busiest minute in those 7 days.
    """

    gpu_type: str
    gpu_count: int = Field(default=1, ge=1, le=1024)
    billing: Literal["on_demand", "reserved"] = "on_demand"
    capacity: float | None = Field(default=None, gt=0, description="work units per minute; omitted = learned")


class Allocation(_Strict):
    """Work units per token for sharing a replica-minute's spend (see module docstring)."""

    w_prefill: float = Field(default=0.25, ge=0, description="per uncached prompt token")
    w_decode: float = Field(default=1.0, ge=0, description="per output token")

    @model_validator(mode="after")
    def _not_both_zero(self):
        if self.w_prefill == 0 and self.w_decode == 0:
            raise ValueError("w_prefill and w_decode cannot both be 0")
        return self


class Slo(_Strict):
    """Latency budget of a task type; omitted = not checked."""

    ttft_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)


class Jobs(_Strict):
    """Cost job windows, seconds."""

    window_s: int = Field(default=7200, ge=1800, le=86400)
    max_call_s: int = Field(default=3600, ge=60, le=86400)
    task_lookback_s: int = Field(default=86400, ge=3600, le=30 * 86400)


class Fleet(_Strict):
    """The whole fleet.yaml."""

    gpu_types: dict[str, GpuType] = Field(min_length=1)
    replicas: dict[str, Replica] = Field(default_factory=dict)
    unknown_replica: Replica | None = Field(default=None, description="default: H100 x 1, else the first GPU type x 1")
    allocation: Allocation = Field(default_factory=Allocation)
    slos: dict[str, Slo] = Field(default_factory=dict)
    abandon_timeout_s: int = Field(default=1800, ge=1)
    jobs: Jobs = Field(default_factory=Jobs)
    # The alert rules' settings; validated by alerts.config.AlertConfig.from_dict (alerts/README.md).
    alerts: dict[str, Any] = Field(default_factory=dict)
    # Spend budgets per tenant / task type; validated by schema.budgets.parse_budgets.
    budgets: dict[str, Any] = Field(default_factory=dict)

    @field_validator("replicas")
    @classmethod
    def _replica_ids(cls, value):
        for replica_id in value:
            if not _REPLICA_ID.match(str(replica_id)):
                raise ValueError(f"bad replica id {replica_id!r} (letters, digits, '_', '.', ':', '-')")
        return value

    @model_validator(mode="after")
    def _cross_checks(self):
        problems = []
        if self.unknown_replica is None:
            default_type = "H100" if "H100" in self.gpu_types else next(iter(self.gpu_types))
            self.unknown_replica = Replica(gpu_type=default_type, gpu_count=1)
        for replica_id, replica in self.replicas.items():
            if replica.gpu_type not in self.gpu_types:
                problems.append(f"replicas.{replica_id}.gpu_type: {replica.gpu_type!r} is not one of gpu_types "
                                f"{sorted(self.gpu_types)}")
        if self.unknown_replica.gpu_type not in self.gpu_types:
            problems.append(f"unknown_replica.gpu_type: {self.unknown_replica.gpu_type!r} is not one of gpu_types "
                            f"{sorted(self.gpu_types)}")
        if self.abandon_timeout_s > self.jobs.window_s - 600:
            problems.append(f"abandon_timeout_s: {self.abandon_timeout_s} must be at most jobs.window_s - 600 "
                            f"({self.jobs.window_s - 600}) so abandonment is decided inside the recomputed window")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# --- loading with line numbers -------------------------------------------------------------------

def _lines(node, path=(), out=None) -> dict[tuple, int]:
    """Map every key path of a composed YAML node tree to its 1-based line."""
    out = {} if out is None else out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out[path + (key,)] = key_node.start_mark.line + 1
            _lines(value_node, path + (key,), out)
            out[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _lines(item, path + (index,), out)
    return out


def _line_of(lines: dict[tuple, int], loc: tuple) -> int | None:
    loc = tuple(str(part) if not isinstance(part, int) else part for part in loc)
    for end in range(len(loc), -1, -1):
        key = loc[:end]
        if key in lines:
            return lines[key]
    return None


def validate_yaml(text: str, source: str, model: type[BaseModel], error: type[Exception], *, what: str, keys: str,
                  empty: str | None = None):
    """Parse YAML ``text`` and validate it with the pydantic ``model``; returns the model instance.

    ``what`` names the document in the error ("fleet config"), ``keys`` its top-level keys (for the
    "must be a mapping" message), ``empty``: the message for an empty document (None = validate ``{}``).

    Raises:
        ``error``: YAML syntax error, or every validation problem, one per line, as
            ``<source>:<line>: <path>: <message>``.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise error(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if data is None:
        if empty is not None:
            raise error(f"{source}: {empty}")
        data = {}
    if not isinstance(data, dict):
        raise error(f"{source}:1: the top level must be a mapping ({keys})")
    lines = _lines(node) if node is not None else {}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            # a whole-document check (a model validator) words each problem "<path>: <message>",
            # joined by "; ": each gets the line of its own path
            parts = [(loc, message)] if loc else [_cross_check(part) for part in message.split("; ")]
            for where, text in parts:
                line = _line_of(lines, where)
                path = ".".join(str(p) for p in where) or "(top level)"
                problems.append(f"{source}:{line if line else '?'}: {path}: {text}")
        raise error(f"invalid {what}:\n  " + "\n  ".join(problems)) from exc


def _cross_check(problem: str) -> tuple[tuple, str]:
    """``("replicas", "r0", "gpu_type"), "'H200' is not ..."`` from ``"replicas.r0.gpu_type: 'H200' is
    not ..."``; ``(), problem`` when it does not start with a key path."""
    head, sep, rest = problem.partition(": ")
    if not sep or " " in head or not head:
        return (), problem
    return tuple(head.split(".")), rest


def parse_fleet(text: str, source: str = "fleet.yaml") -> Fleet:
    """Parse and validate fleet YAML text.

    Raises:
        FleetError: YAML syntax error, or every validation problem, one per line, as
            ``<source>:<line>: <path>: <message>``.
    """
    return validate_yaml(text, source, Fleet, FleetError, what="fleet config", keys="gpu_types:, replicas:, ...",
                         empty="the file is empty (gpu_types is required)")


def load_fleet(path: str | Path) -> Fleet:
    """Read and validate ``path``. Raises FleetError (missing file, bad YAML, invalid values)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FleetError(f"cannot read fleet config {path}: {exc.strerror or exc}") from exc
    return parse_fleet(text, str(path))


# --- sync into the store -----------------------------------------------------------------------

def fleet_rows(fleet: Fleet) -> dict[str, tuple[list[str], list[list]]]:
    """The rows :func:`sync_fleet` writes, per table: (column names, rows)."""
    prices = [[gpu, p.valid_from, float(p.usd_per_gpu_hour)]
              for gpu, spec in sorted(fleet.gpu_types.items()) for p in sorted(spec.prices, key=lambda p: p.valid_from)]
    replicas = [[rid, r.gpu_type, int(r.gpu_count), r.billing, float(r.capacity or 0)]
                for rid, r in sorted(fleet.replicas.items())]
    slos = [[task_type, slo.ttft_ms, slo.e2e_ms] for task_type, slo in sorted(fleet.slos.items())]
    settings = [[fleet.allocation.w_prefill, fleet.allocation.w_decode, fleet.abandon_timeout_s,
                 fleet.unknown_replica.gpu_type, fleet.unknown_replica.gpu_count, fleet.jobs.window_s,
                 fleet.jobs.max_call_s, fleet.jobs.task_lookback_s]]
    return {
        "gpu_prices": (["gpu_type", "valid_from", "usd_per_gpu_hour"], prices),
        "replicas": (["replica", "gpu_type", "gpu_count", "billing", "capacity_work"], replicas),
        "task_slos": (["task_type", "ttft_ms", "e2e_ms"], slos),
        "cost_settings": (["w_prefill", "w_decode", "abandon_timeout_s", "default_gpu_type", "default_gpu_count",
                           "job_window_s", "max_call_s", "task_lookback_s"], settings),
    }


def sync_fleet(store, fleet: Fleet) -> dict[str, int]:
    """Replace the store's fleet tables with ``fleet`` (``cost_settings`` gains a newer row).

    The jobs read the new values from their next run on; minutes older than the trailing window
    keep their old prices until ``run_jobs``/``infercost cost --recompute`` re-runs them.

    Returns:
        Rows written per table.
    """
    written = {}
    for statement in _fleet_clear():
        store.command(statement, tag="fleet.clear")
    for table, (columns, rows) in fleet_rows(fleet).items():
        if rows:
            store.insert(table, rows, columns, tag=f"fleet.{table}")
        written[table] = len(rows)
    return written


def _fleet_clear() -> list[str]:
    return sql_statements(JOBS_DIR / "fleet_clear.sql")
