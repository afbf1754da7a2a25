"""The baseline the benchmark measures in the same run: the first alert rules, which these replace, applied to
the same series at the same evaluation times.

- degradation: a replica's raw ITL p50 or TTFT-free prefill p50 over 2 min >= 1.5x the median of the
  other replicas' (all of them, GPU type and request shape ignored), or its failure rate >= 5% and
  3x the others'; an episode starts after 60 s of that and ends after 180 s without it;
- cascade: a degradation episode, then retry amplification (the evaluator's own retry alert, as the
  first rules had it) starting within 10 min; the culprit is the earliest degradation episode;
- replica down, per-replica telemetry: no such rule (recall 0).
"""

from __future__ import annotations

from statistics import median

from alerts.model import RULE_RETRY, State

RATIO, ERROR_MIN, ERROR_RATIO, FOR_S, CLEAR_S, WITHIN_S = 1.5, 0.05, 3.0, 60.0, 180.0, 600.0


class Baseline:
    """Observes the evaluator after every step; ``episodes`` lists (rule, replica, fired_t, resolved_t,
    culprit) in the shapes score.Episode takes."""

    def __init__(self):
        self.pending: dict[str, float] = {}
        self.firing: dict[str, list] = {}
        self.clear_since: dict[str, float] = {}
        self.closed: list[list] = []
        self.cascade: list | None = None

    def observe(self, t: float, evaluator) -> None:
        fs = evaluator.series
        if fs is None:
            return
        window = fs.window(120)
        itl = {}
        pre = {}
        err = {}
        for name, rep in fs.replicas.items():
            reqs = rep.total("requests", window)
            if reqs >= 5:
                itl[name] = max((rep.get("itl_p50_s", b) or 0.0) for b in window)
                pre[name] = max((rep.get("prefill_tok_p50_s", b) or 0.0) for b in window)
            attempts = rep.total("attempts", window)
            if attempts >= 10:
                err[name] = rep.total("gw_failed", window) / attempts
        hot = set()
        for name in fs.replicas:
            for values in (itl, pre):
                others = [v for o, v in values.items() if o != name and v > 0]
                if name in values and len(others) >= 2 and values[name] >= RATIO * median(others):
                    hot.add(name)
            others = [v for o, v in err.items() if o != name]
            if name in err and others and err[name] >= ERROR_MIN and err[name] >= ERROR_RATIO * max(median(others), 0.01):
                hot.add(name)
        for name in hot:
            self.clear_since.pop(name, None)
            if name not in self.firing:
                start = self.pending.setdefault(name, t)
                if t - start >= FOR_S:
                    self.firing[name] = ["replica_degradation", name, t, None, ""]
        for name in list(self.pending):
            if name not in hot:
                del self.pending[name]
        for name in list(self.firing):
            if name in hot:
                continue
            since = self.clear_since.setdefault(name, t)
            if t - since >= CLEAR_S:
                ep = self.firing.pop(name)
                ep[3] = t
                self.closed.append(ep)
                del self.clear_since[name]
        retry = evaluator.lifecycle.get(RULE_RETRY, "")
        if self.cascade is None and retry is not None and retry.state is State.FIRING:
            retry_t = (retry.started_at - fs.now).total_seconds() + t
            degs = [ep for ep in self.closed + list(self.firing.values())
                    if ep[2] - 120 <= retry_t <= ep[2] + WITHIN_S]
            if degs:
                first = min(degs, key=lambda e: e[2])
                self.cascade = ["cascading_degradation", first[1], t, None, first[1]]

    @property
    def episodes(self) -> list[list]:
        out = self.closed + list(self.firing.values())
        if self.cascade:
            out.append(self.cascade)
        return sorted(out, key=lambda e: e[2])
