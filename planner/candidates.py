"""Candidate fleets and policies the planner replays the workload on, and the current fleet.

Position: planner. A :class:`Candidate` is everything the virtual-time simulator
(``serving.emulator.fleet_sim``) varies: pools of replicas (GPU type, count, engine profile,
vLLM's ``--max-num-seqs``), the gateway's routing policy and hidden retry budget, admission
control caps per priority, and an optional autoscaling rule. Engine profiles (step-time model,
KV capacity) come from ``serving/emulator/profiles.py``, each constant with its source.

The **current fleet** is read from the store (:func:`current_candidate`): the replicas that were
up, their GPU type and count as priced, the model they served; ``--max-num-seqs`` is measured when
a replica ever queued requests beside a full running batch (then the batch size is the cap),
otherwise it is vLLM's default (the profile's), stated as assumed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

from serving.emulator.fleet_sim import POLICIES, ReplicaSpec
from serving.emulator.profiles import PROFILES
from serving.emulator.sim_control import AutoscaleRule

KV_FULL = 0.9  # a queue beside a KV cache this full may be KV-bound, not at --max-num-seqs


class CandidateError(ValueError):
    """A candidate the simulator cannot run (unknown profile or policy, bad counts)."""


@dataclass(frozen=True)
class Pool:
    """``count`` replicas of one kind: GPU type and GPUs per replica (tensor parallel), engine
    ``profile`` name, ``max_num_seqs`` (None = the profile's default, vLLM's 256)."""

    gpu_type: str
    count: int
    profile: str
    gpu_count: int = 1
    max_num_seqs: int | None = None

    def label(self) -> str:
        gpus = f"{self.gpu_count}x" if self.gpu_count > 1 else ""
        seqs = f" seqs {self.max_num_seqs}" if self.max_num_seqs else ""
        return f"{self.count}x {gpus}{self.gpu_type}{seqs}"


@dataclass(frozen=True)
class Candidate:
    """A fleet and its policies (module docstring). ``replica_ids``: explicit ids (the current
    fleet keeps its own, so the replay's spans name the same replicas); else ``<gpu>-<n>``."""

    name: str
    pools: tuple[Pool, ...]
    policy: str = "least_loaded"
    gateway_retries: int = 1
    admission: tuple[tuple[str, int], ...] | None = None
    autoscale: AutoscaleRule | None = None
    origin: str = "user"  # current | user | melange | local_search | lever
    replica_ids: tuple[str, ...] | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self):
        problems = []
        if not self.pools or sum(p.count for p in self.pools) < 1:
            problems.append("needs at least one replica")
        for p in self.pools:
            if p.count < 0 or p.gpu_count < 1:
                problems.append(f"pool {p.gpu_type}: count must be >= 0 and gpu_count >= 1")
            if p.profile not in PROFILES:
                problems.append(f"pool {p.gpu_type}: unknown engine profile {p.profile!r} "
                                f"(known: {', '.join(sorted(PROFILES))})")
            elif PROFILES[p.profile].gpu_count != p.gpu_count:
                # the price counts the pool's GPUs, the replay runs the profile's: they must be the same
                problems.append(f"pool {p.gpu_type}: {p.gpu_count} GPU(s) per replica but engine profile "
                                f"{p.profile!r} models {PROFILES[p.profile].gpu_count}")
            if p.max_num_seqs is not None and p.max_num_seqs < 1:
                problems.append(f"pool {p.gpu_type}: max_num_seqs must be >= 1")
        if self.policy not in POLICIES:
            problems.append(f"unknown routing policy {self.policy!r} (known: {', '.join(POLICIES)})")
        if self.gateway_retries < 0:
            problems.append("gateway_retries must be >= 0")
        if self.replica_ids is not None and len(self.replica_ids) != self.n_replicas:
            problems.append("replica_ids must name every replica")
        if self.autoscale is not None:
            try:
                self.autoscale.validate(self.n_replicas)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise CandidateError(f"candidate {self.name!r}: " + "; ".join(problems))

    @property
    def n_replicas(self) -> int:
        return sum(p.count for p in self.pools)

    @property
    def gpus(self) -> int:
        return sum(p.count * p.gpu_count for p in self.pools)

    def replicas(self) -> list[ReplicaSpec]:
        """The simulator's replicas, pool by pool (autoscaling boots them in this order)."""
        out, seen = [], {}
        for p in self.pools:
            for _ in range(p.count):
                n = seen[p.gpu_type] = seen.get(p.gpu_type, -1) + 1
                rid = (self.replica_ids[len(out)] if self.replica_ids is not None
                       else f"{p.gpu_type.lower()}-{n}")
                out.append(ReplicaSpec(rid, p.profile, p.gpu_type, p.gpu_count, max_num_seqs=p.max_num_seqs))
        return out

    def sim_kwargs(self) -> dict:
        """The keyword arguments of ``fleet_sim.simulate`` this candidate sets (besides the fleet)."""
        return {"policy": self.policy, "gateway_retries": self.gateway_retries,
                "admission_caps": dict(self.admission) if self.admission else None, "autoscale": self.autoscale}

    def key(self) -> tuple:
        """What makes two candidates the same run (name and origin aside)."""
        pools = tuple(sorted((p.gpu_type, p.gpu_count, p.profile, p.max_num_seqs or PROFILES[p.profile].max_num_seqs,
                              p.count) for p in self.pools if p.count > 0))
        return (pools, self.policy, self.gateway_retries, self.admission, self.autoscale)

    def label(self) -> str:
        """One line: pools, policy and the knobs that are set."""
        parts = [" + ".join(p.label() for p in self.pools if p.count > 0), self.policy]
        if self.gateway_retries != 1:
            parts.append(f"gateway retries {self.gateway_retries}")
        if self.admission:
            parts.append("admission " + ", ".join(f"{k} {v}" for k, v in self.admission))
        if self.autoscale:
            a = self.autoscale
            parts.append(f"autoscale {a.min_replicas}..{a.max_replicas or self.n_replicas} "
                         f"@{a.target_load_per_replica:g}/replica")
        return " · ".join(parts)

    def spec(self) -> dict:
        """JSON-able description (stored with the results)."""
        return {"name": self.name, "origin": self.origin, "pools": [asdict(p) for p in self.pools],
                "policy": self.policy, "gateway_retries": self.gateway_retries,
                "admission": dict(self.admission) if self.admission else None,
                "autoscale": asdict(self.autoscale) if self.autoscale else None,
                "replica_ids": list(self.replica_ids) if self.replica_ids else None, "label": self.label()}

    def spec_json(self) -> str:
        return json.dumps(self.spec(), sort_keys=True)

    def with_(self, **changes) -> "Candidate":
        """A copy with fields replaced (explicit replica ids are dropped when the pools change)."""
        if "pools" in changes and "replica_ids" not in changes:
            changes["replica_ids"] = None
        return replace(self, **changes)


def profile_for(gpu_type: str, gpu_count: int | None, model: str, named: dict[str, str] | None = None) -> str:
    """The engine profile of ``gpu_count`` x ``gpu_type`` serving ``model`` (``gpu_count`` None: any).

    ``named``: GPU type -> profile name (the candidates file's ``gpu_types``) wins. Raises
    CandidateError naming the known profiles when none matches."""
    if named and gpu_type in named:
        return named[gpu_type]
    matches = [p.name for p in PROFILES.values()
               if p.gpu_type.lower() == gpu_type.lower() and gpu_count in (None, p.gpu_count) and (not model or p.model == model)]
    if not matches:
        known = ", ".join(f"{p.name} ({p.gpu_count}x {p.gpu_type}, {p.model})" for p in PROFILES.values())
        raise CandidateError(f"no engine profile for {f'{gpu_count}x ' if gpu_count else ''}{gpu_type} serving {model or 'its model'}; "
                             f"known: {known}. Name one under gpu_types: in the candidates file.")
    return sorted(matches, key=len)[0]  # the base profile, not a derived one (e.g. '-seqs16')


def current_candidate(replicas_df, named_profiles: dict[str, str] | None = None, *, policy: str,
                      gateway_retries: int, max_num_seqs: int | None = None,
                      admission: dict | None = None) -> tuple[Candidate, dict]:
    """The fleet that served the period (``schema.queries.planner.replicas``) as a candidate, and
    the evidence of its settings. ``max_num_seqs``: the operator's value (wins over inference)."""
    if not len(replicas_df):
        raise CandidateError("no replica was up in the period: nothing to replay")
    evidence, groups = {}, {}
    for row in replicas_df.itertuples(index=False):
        gpu_count = int(row.gpu_count or 1)
        profile = profile_for(row.gpu_type, gpu_count, row.model or "", named_profiles)
        seqs, how = max_num_seqs, "set in the candidates file"
        if seqs is None:
            waited = int(row.waiting_scrapes or 0) > 0 and row.running_max_waiting == row.running_max_waiting
            kv = float(row.kv_usage_max) if row.kv_usage_max == row.kv_usage_max else 0.0
            if waited and row.running_max_waiting >= 1 and kv < KV_FULL:
                seqs = int(round(row.running_max_waiting))
                how = (f"measured: {int(row.waiting_scrapes)} scrapes with requests waiting beside a running "
                       f"batch of {seqs} (KV cache at most {kv:.0%})")
            else:
                how = f"assumed vLLM's default {PROFILES[profile].max_num_seqs}: the replica never queued"
        evidence[f"{row.replica}.max_num_seqs"] = how
        evidence[f"{row.replica}.profile"] = f"{profile} ({row.gpu_type} x {gpu_count}, {row.model or '?'})"
        groups.setdefault((row.gpu_type, gpu_count, profile, seqs), []).append(str(row.replica))
    pools, ids = [], []
    for (gpu_type, gpu_count, profile, seqs), rids in groups.items():
        pools.append(Pool(gpu_type, len(rids), profile, gpu_count, seqs))
        ids.extend(rids)
    cand = Candidate("current", tuple(pools), policy=policy, gateway_retries=gateway_retries,
                     admission=tuple(sorted(admission.items())) if admission else None, origin="current",
                     replica_ids=tuple(ids))
    return cand, evidence
