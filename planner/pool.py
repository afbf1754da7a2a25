"""Evaluate candidates on several cores: worker processes, each with its own scratch store.

Position: planner. chDB allows one engine directory per process, so each worker is a
*spawned* process (a fresh interpreter: a forked child would inherit the parent's engine) that
opens ``chdb://<scratch dir>/worker-<i>``, migrates it once and evaluates candidates from a queue
(``evaluate.evaluate``). The workload travels once, pickled to a file. Workers report progress in
simulated tasks; :class:`Evaluator` drives one tqdm bar over every submitted candidate, so its ETA
covers the whole search. ``workers=0`` evaluates in this process, in a scratch *database* of an
engine given by ``inprocess_url`` (tests: the in-memory engine this process already uses).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import queue
import shutil
import tempfile
import traceback
from pathlib import Path

from planner.evaluate import JOBS_SHARE, CandidateResult, Scratch, evaluate

log = logging.getLogger(__name__)


def _worker(index: int, workload_path: str, scratch_dir: str, fleet_base: dict, slo_target: float, seed: int,
            jobs: mp.Queue, results: mp.Queue) -> None:
    try:
        with open(workload_path, "rb") as fh:
            workloads = pickle.load(fh)
        scratch = Scratch.open(f"chdb://{Path(scratch_dir) / f'worker-{index}'}")
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        results.put(("fatal", index, traceback.format_exc(limit=5)))
        return
    results.put(("ready", index, None))
    while True:
        job = jobs.get()
        if job is None:
            break
        key, on, candidate, plans, faults, compare, job_seed = job
        try:
            result = evaluate(scratch, workloads[on], candidate, fleet_base, plans=plans,
                              seed=seed if job_seed is None else job_seed, slo_target=slo_target,
                              report=lambda n, k=key: results.put(("progress", k, n)), faults=faults,
                              compare=compare)
        except Exception as exc:  # noqa: BLE001 - one bad candidate must not stop the search
            result = CandidateResult(candidate.name, candidate.spec(), candidate.origin,
                                     error=f"{type(exc).__name__}: {exc}")
        results.put(("done", key, result))
    scratch.store.close()


class Evaluator:
    """Evaluate batches of candidates (``evaluate_many``) on ``workers`` processes; a context manager.

    ``progress``: show a tqdm bar (units: simulated tasks, plus the cost jobs' share) with ETA.
    ``windows``: more workloads by name (windows of the period, ``screen.py``) candidates may be replayed
    on (``evaluate_many(..., on=name)``); they travel to the workers with the period's.
    """

    def __init__(self, workload, fleet_base: dict, *, workers: int = 2, slo_target: float = 0.95, seed: int = 0,
                 scratch_dir: str | Path | None = None, progress: bool = True, inprocess_url: str = "chdb://memory",
                 windows: dict | None = None):
        self.fleet_base = fleet_base
        self.workloads = {"full": workload, **(windows or {})}
        self.workers, self.slo_target, self.seed = max(0, int(workers)), slo_target, seed
        self.inprocess_url = inprocess_url
        self.progress = progress
        self.bar = None
        self.committed = 0  # progress units of the candidates submitted so far
        self._procs: list = []
        self._scratch = None
        self._dir = Path(tempfile.mkdtemp(prefix="infercost-plan-", dir=scratch_dir))
        self.evaluated = 0

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Evaluator":
        if self.progress:
            from tqdm import tqdm

            self.bar = tqdm(total=0, unit="task", desc="planning", mininterval=0.5, smoothing=0.05)
        if self.workers == 0:
            self._scratch = Scratch.open(self.inprocess_url, f"planner_scratch_{os.getpid()}")
            return self
        ctx = mp.get_context("spawn")
        path = self._dir / "workload.pickle"
        with open(path, "wb") as fh:
            pickle.dump(self.workloads, fh, protocol=pickle.HIGHEST_PROTOCOL)
        self._jobs, self._results = ctx.Queue(), ctx.Queue()
        for i in range(self.workers):
            proc = ctx.Process(target=_worker, name=f"infercost-plan-{i}", daemon=True,
                               args=(i, str(path), str(self._dir), self.fleet_base, self.slo_target, self.seed,
                                     self._jobs, self._results))
            proc.start()
            self._procs.append(proc)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for _ in self._procs:
            self._jobs.put(None)
        for proc in self._procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
        self._procs = []
        if self._scratch is not None:
            self._scratch.drop()
            self._scratch = None
        if self.bar is not None:
            self.bar.total = self.bar.n  # the search may stop before its bound: end the bar at 100 %
            self.bar.close()
            self.bar = None
        shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ work
    def units(self, plans=None, on: str = "full") -> int:
        """Progress units of one candidate: its simulated tasks plus the cost jobs' share."""
        n_tasks = len(plans if plans is not None else self.workloads[on].plans)
        return n_tasks + max(1, int(n_tasks * JOBS_SHARE))

    def expect(self, candidates: dict[str, int]) -> None:
        """Size the bar for ``candidates`` more replays per workload (``{"full": n, "screen": m}``: the
        search's bound), so its ETA covers the whole run."""
        if self.bar is not None:
            more = sum(n * self.units(on=on) for on, n in candidates.items() if n)
            self.bar.total = max(self.bar.total, self.committed + more)
            self.bar.refresh()

    def _advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def evaluate_many(self, candidates, plans=None, faults=None, compare=None, seeds=None,
                      on: str = "full") -> list[CandidateResult]:
        """Evaluate ``candidates`` (on ``plans``, default those of the workload ``on``: "full", the
        period's, or the name of one of ``windows``); results in the same order.

        ``faults``: one ``FaultEvent`` list per candidate (None: all fault-free); ``compare``: the
        backtest's excluded windows (``evaluate.evaluate``); ``seeds``: one replay seed per candidate
        (None: the evaluator's). A candidate that fails gets a result with
        ``error`` set; a worker that dies raises RuntimeError.
        """
        candidates = list(candidates)
        faults = list(faults) if faults is not None else [None] * len(candidates)
        seeds = list(seeds) if seeds is not None else [None] * len(candidates)
        units = self.units(plans, on)
        self.committed += units * len(candidates)
        if self.bar is not None:
            self.bar.total = max(self.bar.total, self.committed)
            self.bar.refresh()
        if self.workers == 0:
            out = []
            for c, f, sd in zip(candidates, faults, seeds):
                out.append(self._one_inprocess(c, plans, f, compare, sd, on))
            return out
        for i, (c, f, sd) in enumerate(zip(candidates, faults, seeds)):
            self._jobs.put((i, on, c, plans, f, compare, sd))
        done: dict[int, CandidateResult] = {}
        got: dict[int, int] = {}
        while len(done) < len(candidates):
            try:
                kind, key, value = self._results.get(timeout=5)
            except queue.Empty:
                dead = [p.name for p in self._procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"planner worker(s) {', '.join(dead)} died")
                continue
            if kind == "fatal":
                raise RuntimeError(f"planner worker {key} could not start:\n{value}")
            if kind == "progress":
                got[key] = got.get(key, 0) + value
                self._advance(value)
            elif kind == "done":
                done[key] = value
                self._advance(max(0, units - got.get(key, 0)))  # a failed run still counts as done
        self.evaluated += len(candidates)
        return [done[i] for i in range(len(candidates))]

    def _one_inprocess(self, candidate, plans, faults=None, compare=None, seed=None, on="full") -> CandidateResult:
        units = self.units(plans, on)
        seen = [0]

        def report(n):
            seen[0] += n
            self._advance(n)

        try:
            result = evaluate(self._scratch, self.workloads[on], candidate, self.fleet_base, plans=plans,
                              seed=self.seed if seed is None else seed, slo_target=self.slo_target, report=report,
                              faults=faults, compare=compare)
        except Exception as exc:  # noqa: BLE001 - as in the workers
            result = CandidateResult(candidate.name, candidate.spec(), candidate.origin,
                                     error=f"{type(exc).__name__}: {exc}")
        self._advance(max(0, units - seen[0]))
        self.evaluated += 1
        return result
