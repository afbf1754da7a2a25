"""Static batching, for comparison with continuous batching (the Orca / Anyscale baseline).

A batch of up to ``max_num_seqs`` queued requests is formed when the engine is idle; prompts are
padded to the batch's longest prompt and every sequence keeps decoding (padding) until the
batch's longest output is done, as HuggingFace ``generate`` and FasterTransformer do; KV memory
for the whole padded length is reserved up front, which also caps the batch size. Results are
returned when the batch completes. Same driver interface as ``engine.Engine``
(``add/plan/commit/abort/crash``) and the same step-time model.
"""

from __future__ import annotations

import math
import random
from collections import deque

from serving.emulator.engine import DECODE, FINISHED, PREFILL, WAITING, Engine, EngineRequest
from serving.emulator.profiles import Profile
from serving.emulator.stats import EngineStats


class _StaticPending:
    __slots__ = ("phase", "start", "k", "t0", "growth", "end")

    def __init__(self, phase, start, k, t0, growth, end):
        self.phase, self.start, self.k, self.t0, self.growth, self.end = phase, start, k, t0, growth, end


class StaticEngine:
    mode = "static"

    def __init__(self, profile: Profile, *, seed: int | None = 0, start_time: float = 0.0,
                 kv_blocks: int | None = None, prefix_caching: bool = False,
                 reserve_tokens: int | None = None):
        self.profile = profile
        self.capacity = kv_blocks if kv_blocks is not None else profile.kv_capacity_blocks
        self.max_seqs = profile.max_num_seqs
        self.rng = random.Random(seed)
        self.slowdown = 1.0
        self.kv_cut = 0.0
        self.now = start_time
        self.stats = EngineStats(start_time=start_time, max_model_len=profile.max_model_len)
        self.waiting: deque[EngineRequest] = deque()
        self.batch: list[EngineRequest] = []
        self.by_id: dict[str, EngineRequest] = {}
        self.P = 0
        self.L = 0
        self.done_steps = -1  # -1: prefill not run yet; d >= 0: decode steps done
        self.pending = None
        self.reserve_tokens = reserve_tokens

    # queries ---------------------------------------------------------------------------------
    @property
    def cap_eff(self) -> int:
        return max(0, int(self.capacity * (1.0 - self.kv_cut)))

    @property
    def num_running(self) -> int:
        return len(self.batch)

    num_waiting = Engine.num_waiting  # the same deque of waiting requests

    def idle(self) -> bool:
        return not self.batch and not self.waiting

    def kv_usage(self) -> float:
        b = self.profile.block_size
        used = len(self.batch) * -(-(self.P + self.L) // b)
        return min(1.0, used / self.cap_eff) if self.cap_eff else 1.0

    def out_tokens(self, req: EngineRequest) -> int:
        if req.state == DECODE:
            return min(req.target_out, 1 + self.done_steps)
        return req.out

    # inputs ------------------------------------------------------------------------------------
    def add(self, req: EngineRequest, now: float | None = None) -> None:
        req.queued = req.arrival if now is None else now
        if self.idle() and self.pending is None and req.queued > self.now:
            self.now = req.queued
        req.state = WAITING
        self.waiting.append(req)
        self.by_id[req.request_id] = req

    def abort(self, request_id: str):
        req = self.by_id.pop(request_id, None)
        if req is None:
            return None
        req.out = self.out_tokens(req)
        if req.state == WAITING:
            self.waiting.remove(req)
        req.state = FINISHED  # its slot keeps computing padding until the batch ends
        req.finish_reason = "abort"
        req.finished = self.now
        if not req.prompt_counted:
            self.stats.prompt_tokens += req.prompt_tokens
            req.prompt_counted = True
        return req

    def crash(self):
        lost = list(self.by_id.values())
        for req in lost:
            req.out = self.out_tokens(req)
            req.state = FINISHED
            req.finish_reason = "error"
        self.by_id = {}
        self.waiting.clear()
        self.batch = []
        self.pending = None
        return lost

    def restart(self, now: float) -> None:
        self.crash()
        self.now = now
        self.stats = EngineStats(start_time=now, max_model_len=self.profile.max_model_len)

    # planning ----------------------------------------------------------------------------------
    def plan(self, horizon: float = math.inf, max_steps: int | None = None):
        if self.pending is not None:
            return self.pending.end
        prof = self.profile
        f = self.slowdown
        if prof.noise_sigma > 0:
            f *= math.exp(self.rng.gauss(0.0, prof.noise_sigma))
        if not self.batch:
            if not self.waiting:
                return None
            b = prof.block_size
            batch, P, L = [], 0, 0
            while self.waiting and len(batch) < self.max_seqs:
                r = self.waiting[0]
                p2, l2 = max(P, r.prompt_tokens), max(L, r.target_out)
                per_seq = self.reserve_tokens or (p2 + l2)
                if batch and (len(batch) + 1) * -(-per_seq // b) > self.cap_eff:
                    break  # KV for the full (padded or configured) length is reserved per sequence
                batch.append(self.waiting.popleft())
                P, L = p2, l2
            for r in batch:
                r.state = PREFILL
                r.scheduled = self.now
            self.batch, self.P, self.L, self.done_steps = batch, P, L, -1
            B = len(batch)
            t = f * prof.step_time(B * P, 0, B * P)
            self.pending = _StaticPending("prefill", self.now, 1, t, 0.0, self.now + t)
            return self.now + t
        B = len(self.batch)
        t0 = f * prof.step_time(0, B, B * (self.P + self.done_steps + 1))
        growth = f * prof.kv_read_per_token_s * B
        k = self.L - 1 - self.done_steps
        if max_steps:
            k = min(k, max_steps)
        if horizon < math.inf:
            k = min(k, Engine._steps_to_reach(t0, growth, horizon - self.now))
        end = self.now + Engine._run_time(t0, growth, k)
        self.pending = _StaticPending("decode", self.now, k, t0, growth, end)
        return end

    def commit(self, until: float | None = None):
        if self.pending is None:
            return []
        p = self.pending
        phase, start, k, t0, growth, end = p.phase, p.start, p.k, p.t0, p.growth, p.end
        self.pending = None
        if until is not None and k > 1 and until < end:
            k = min(k, Engine._steps_to_reach(t0, growth, until - start))
        self.now = start + Engine._run_time(t0, growth, k)
        st = self.stats
        live = [r for r in self.batch if r.state != FINISHED]
        if phase == "prefill":
            st.iteration_tokens.observe(len(self.batch) * self.P)
            for r in live:
                r.first_token = self.now
                r.state = DECODE
                st.ttft.observe(self.now - r.arrival)
                st.prompt_tokens += r.prompt_tokens
                r.prompt_counted = True
            st.generation_tokens += len(live)
            self.done_steps = 0
        else:
            d0 = self.done_steps
            st.iteration_tokens.observe(len(self.batch), k)
            for r in live:
                real = max(0, min(r.target_out - 1, d0 + k) - d0)  # tokens of its own in these steps
                if real:
                    st.generation_tokens += real
                    st.itl.observe_series(t0, growth, real)
            self.done_steps += k
        if self.done_steps < self.L - 1:
            return []
        finished = []
        for r in live:
            r.out = r.target_out
            r.state = FINISHED
            r.finished = r.last_token = self.now
            r.finish_reason = "length" if r.length_capped else "stop"
            self.by_id.pop(r.request_id, None)
            Engine._finish_stats(st, r, self.now)
            finished.append(r)
        self.batch = []
        return finished

    run_until_idle = Engine.run_until_idle

    @property
    def running(self) -> dict:
        return {r.request_id: r for r in self.batch if r.state != FINISHED}
