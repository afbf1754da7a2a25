"""The engine model: vLLM V1 iteration-level (continuous) batching over a paged KV cache.

Where it sits: the core of serving/emulator, clock-agnostic. The live server (``server.py``)
drives it in real time one step at a time; the virtual-time simulators (``fleet_sim.py``) drive
it with a simulated clock and let it jump many identical decode steps at once.

Scheduling, as vLLM V1's ``Scheduler.schedule`` does it, per step:
1. Running requests first, in arrival-at-running order: each decoding request gets 1 token,
   each request still prefilling gets a chunk of its remaining prompt (chunked prefill), all
   under ``max_num_batched_tokens``.
2. When the KV cache cannot hold the step's new blocks, the newest running request is preempted
   by recompute: its blocks are freed (its full prompt blocks stay in the prefix cache) and it
   goes back to the FRONT of the waiting queue; later it re-prefills prompt + tokens so far.
3. If nothing was preempted, waiting requests join (FCFS) while ``max_num_seqs`` and the token
   budget allow and their blocks fit, after a prefix-cache lookup that skips cached full blocks.
A request whose prefill completes samples its first token at the end of that step.

Speed: decoding requests are kept as an aggregate (a global decode-step counter plus per-request
offsets), so a run of k steps with the same batch composition costs O(1). Such a "macro step"
ends at the next request finish, the next KV-block shortage, or an external event (``horizon``).

Clock: ``self.now`` is the engine time in seconds (the live driver uses ``time.monotonic()``
offsets, virtual time uses simulated seconds). All request timestamps are in this clock.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

from serving.emulator.kvcache import PrefixCache
from serving.emulator.request import DECODE, FINISHED, PREFILL, WAITING, EngineRequest  # noqa: F401 (re-export)
from serving.emulator.profiles import Profile
from serving.emulator.stats import EngineStats

class _Pending:
    __slots__ = ("start", "k", "t0", "growth", "chunks", "n_dec", "prefill_tokens", "end")


class Engine:
    """Continuous-batching engine model. See the module docstring for the scheduling rules.

    ``profile``: timing and KV size. ``prefix_caching``: vLLM's ``--enable-prefix-caching``
    (on by default in V1). ``seed``: for step-time noise (``profile.noise_sigma``).
    Faults: ``slowdown`` (step-time factor, 1 = healthy), ``kv_cut`` (fraction of KV blocks
    taken away: preemption pressure).
    """

    mode = "continuous"

    def __init__(self, profile: Profile, *, prefix_caching: bool = True, seed: int | None = 0,
                 start_time: float = 0.0, kv_blocks: int | None = None, detailed_stats: bool = True):
        self.profile = profile
        self.block = profile.block_size
        self.capacity = kv_blocks if kv_blocks is not None else profile.kv_capacity_blocks
        self.max_seqs = profile.max_num_seqs
        self.max_batched = profile.max_num_batched_tokens
        self.rng = random.Random(seed)
        self.slowdown = 1.0
        self._kv_cut = 0.0
        self.cap_eff = self.capacity
        self.now = start_time
        self.cache = PrefixCache(prefix_caching)
        self.detailed_stats = detailed_stats
        self.stats = EngineStats(start_time=start_time, max_model_len=profile.max_model_len, detailed=detailed_stats)
        self._reset_state()

    def _reset_state(self):
        self.waiting: deque[EngineRequest] = deque()
        self.unseen: deque[EngineRequest] = deque()  # handed over, not yet taken in by a step (FIFO)
        self.running: dict[str, EngineRequest] = {}
        self.prefilling: dict[str, EngineRequest] = {}
        self.by_id: dict[str, EngineRequest] = {}
        self.S = 0  # decode steps applied to the decode set so far
        self.n_dec = 0
        self.sum_a = 0  # sum of (ctx - S) over the decode set
        self.sum_q = 0
        self.res = [0] * self.block
        self.dec_now = 0  # blocks of the decode set at step S (kept equal to dec_blocks(S))
        self.dec_shared = 0  # shared (prefix-cache) blocks referenced by decoding requests
        self.own_prefill = 0  # own blocks of requests in PREFILL
        self.heap: list = []
        self.errored: list[EngineRequest] = []  # rejected at admission; returned by the next commit
        self.seq = 0
        self.pending: _Pending | None = None
        self.cache.clear()

    # ------------------------------------------------------------------ queries
    @property
    def kv_cut(self) -> float:
        """Fraction of KV blocks taken away by a fault (0 = healthy)."""
        return self._kv_cut

    @kv_cut.setter
    def kv_cut(self, value: float) -> None:
        self._kv_cut = float(value)
        self.cap_eff = max(0, int(self.capacity * (1.0 - self._kv_cut)))

    def dec_blocks(self, S: int) -> int:
        """Blocks held by the decode set after ``S`` decode steps: sum of ceil(ctx_i / block)."""
        b = self.block
        res = self.res
        total = self.sum_q
        for r in range(b):
            c = res[r]
            if c:
                total += c * ((r + S) // b)
        return total

    def used_blocks(self) -> int:
        return self.own_prefill + self.dec_now - self.dec_shared + self.cache.ref_blocks

    def kv_usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: used blocks / blocks, 0..1."""
        cap = self.cap_eff
        return min(1.0, self.used_blocks() / cap) if cap else 1.0

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def idle(self) -> bool:
        return not self.running and not self.waiting

    def out_tokens(self, req: EngineRequest) -> int:
        """Tokens generated so far by ``req`` (as of the last committed step)."""
        if req.state == DECODE:
            return req.out_entry + (self.S - req.s_entry)
        return req.out

    # ------------------------------------------------------------------ inputs
    def add(self, req: EngineRequest, now: float | None = None) -> None:
        """Queue a request at time ``now`` (default ``req.arrival``); it joins at the next step boundary.

        ``req.arrival`` is when the API server received it; drivers call ``add`` when the API server
        has handed it over (``frontend.py``: the profile's constant ``input_overhead_s``, or its place
        in the front end's queue), so TTFT includes that time.
        """
        if req.request_id in self.by_id:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        req.handed_over = req.queued = req.arrival if now is None else now
        if self.idle() and self.pending is None and req.queued > self.now:
            self.now = req.queued
        req.state = WAITING
        self.waiting.append(req)
        self.unseen.append(req)
        self.by_id[req.request_id] = req

    def abort(self, request_id: str) -> EngineRequest | None:
        """Abort a request (client went away) at ``self.now``; commit pending steps first.

        Frees its blocks; counts its prompt tokens if its prefill never completed (vLLM's
        ``prompt_tokens_total`` includes aborted requests). Returns it with finish reason
        ``abort``, or None when unknown/finished.
        """
        req = self.by_id.get(request_id)
        if req is None:
            return None
        if req.state == DECODE:
            req.out = self.out_tokens(req)
        self._release(req)
        if req.state == WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        req.state = FINISHED
        req.finish_reason = "abort"
        req.finished = self.now
        if not req.prompt_counted:
            self._count_prompt(req)
        del self.by_id[request_id]
        return req

    def crash(self) -> list[EngineRequest]:
        """The engine dies: every queued or running request is lost (no span, no success count).

        Returns the lost requests with ``out`` = tokens generated before the crash.
        """
        lost = []
        for req in self.by_id.values():
            if req.state == DECODE:
                req.out = self.out_tokens(req)
            req.state = FINISHED
            req.finish_reason = "error"
            req.finished = self.now
            lost.append(req)
        self.by_id = {}
        self._reset_state()
        return lost

    def restart(self, now: float) -> None:
        """A fresh engine process: empty cache, counters reset (Prometheus sees a counter reset)."""
        self._reset_state()
        self.now = now
        self.stats = EngineStats(start_time=now, max_model_len=self.profile.max_model_len,
                                 detailed=self.detailed_stats)

    # ------------------------------------------------------------------ block bookkeeping
    def _release(self, req: EngineRequest) -> None:
        if req.state == DECODE:
            self.n_dec -= 1
            self.sum_a -= req.a
            self.sum_q -= req.q
            self.res[req.r] -= 1
            self.dec_now -= req.q + (req.r + self.S) // self.block
            self.dec_shared -= req.shared_blocks
            req.ver += 1
            self.running.pop(req.request_id, None)
        elif req.state == PREFILL:
            self.own_prefill -= req.own_blocks
            self.prefilling.pop(req.request_id, None)
            self.running.pop(req.request_id, None)
        for key in req.seg_refs:
            self.cache.unref(key)
        req.seg_refs = []
        req.own_blocks = 0
        req.shared_blocks = 0

    def _preempt(self, req: EngineRequest) -> None:
        if req.state == DECODE:
            req.out = self.out_tokens(req)
        if req.out:
            req.last_token = self.now
        self._release(req)
        req.state = WAITING
        req.computed = 0
        req.next_seg = 0
        req.target_len = req.prompt_tokens + req.out
        self.waiting.appendleft(req)
        req.preemptions += 1
        self.stats.num_preemptions += 1

    def _make_room(self) -> None:
        free = self.cap_eff - self.used_blocks() - self.cache.evictable_blocks
        if free < 0:
            self.cache.evict(-free)

    def _enter_decode(self, req: EngineRequest) -> None:
        b = self.block
        ctx = req.prompt_tokens + req.out
        req.state = DECODE
        req.s_entry = self.S
        req.out_entry = req.out
        req.a = ctx - self.S
        req.q, req.r = divmod(req.a + b - 1, b)
        self.n_dec += 1
        self.sum_a += req.a
        self.sum_q += req.q
        self.res[req.r] += 1
        self.dec_now += req.q + (req.r + self.S) // b
        self.dec_shared += req.shared_blocks
        self.own_prefill -= req.own_blocks
        req.own_blocks = 0
        self.seq += 1
        heapq.heappush(self.heap, (req.s_entry + req.target_out - req.out, self.seq, req, req.ver))

    def _next_finish_S(self):
        heap = self.heap
        while heap:
            fs, _, req, ver = heap[0]
            if req.state == DECODE and req.ver == ver:
                return fs
            heapq.heappop(heap)
        return None

    # ------------------------------------------------------------------ planning
    def _chunk_plan(self, budget: int):
        chunks = []
        need = 0
        b = self.block
        for req in self.prefilling.values():
            if budget <= 0:
                break
            n = min(req.target_len - req.computed, budget)
            budget -= n
            chunks.append((req, n))
            need += max(0, -(-(req.computed + n) // b) - req.own_blocks - req.shared_blocks)
        return chunks, need, budget

    def plan(self, horizon: float = math.inf, max_steps: int | None = None) -> float | None:
        """Plan the next step (or run of identical decode steps) starting at ``self.now``.

        Preemptions and admissions of this step happen now. ``horizon``: the run of decode steps
        ends at the first step boundary at or after it (an external event is due then).
        ``max_steps``: cap on steps in one run (the live driver uses 1). Returns the end time of
        the planned run, or None when the engine is idle.
        """
        if self.pending is not None:
            return self.pending.end
        if self.waiting and not self.running and self.waiting[0].handed_over > self.now:
            self.now = self.waiting[0].handed_over  # idle until the next request has been handed over
        # vLLM's engine core takes the requests handed over during a step in at the step's end, just
        # before scheduling the next (EngineCoreEventType.QUEUED): its queue time is the wait for
        # capacity from there, and the wait for the step in flight is in TTFT before it.
        unseen = self.unseen
        while unseen and unseen[0].handed_over <= self.now:
            unseen.popleft().queued = self.now
        if not self.waiting and not self.prefilling:
            if not self.n_dec:
                return None
            # fast path: a pure decode batch with room for its next blocks
            used = self.used_blocks()
            if used + self.res[-(self.S + 1) % self.block] <= self.cap_eff:
                if self.cap_eff - used - self.cache.evictable_blocks < 0:
                    self.cache.evict(used + self.cache.evictable_blocks - self.cap_eff)
                return self._plan_decode_run(False, horizon, max_steps, used)
        prof = self.profile
        b = self.block
        preempted = False
        while True:
            budget = self.max_batched - self.n_dec
            chunks, need, budget = self._chunk_plan(budget)
            if self.n_dec:  # decoding requests whose next token opens a new block
                need += self.res[-(self.S + 1) % b]
            if self.used_blocks() + need <= self.cap_eff or not self.running:
                break
            victim = self.running[next(reversed(self.running))]
            self._preempt(victim)
            preempted = True
        # admissions
        if not preempted:
            cache = self.cache
            while self.waiting and len(self.running) < self.max_seqs and budget > 0:
                req = self.waiting[0]
                if req.handed_over > self.now:
                    # handed over after this step's start (a live replica's model clock runs behind
                    # the wall clock after a host stall): vLLM's scheduler sees it at the next step
                    break
                nseg = cache.lookup(req.segments) if req.segments else 0
                hit = req.segments[nseg - 1][1] if nseg else 0
                computed = min(hit, req.target_len - 1)
                n = min(req.target_len - computed, budget)
                hit_blocks = hit // b
                blocks = max(0, -(-(computed + n) // b) - hit_blocks)
                extra = cache.unreferenced_blocks(req.segments, nseg) if nseg else 0
                if -(-req.target_len // b) > self.cap_eff:
                    # can never fit: vLLM would reject it; finish with an error rather than hang
                    self.waiting.popleft()
                    req.state = FINISHED
                    req.finish_reason = "error"
                    req.finished = req.last_token = self.now
                    self.by_id.pop(req.request_id, None)
                    self.stats.request_success["error"] += 1
                    self.errored.append(req)
                    continue
                if self.used_blocks() + need + blocks + extra > self.cap_eff:
                    break
                self.waiting.popleft()
                for key, _end in req.segments[:nseg]:
                    cache.ref(key)
                    req.seg_refs.append(key)
                req.shared_blocks = hit_blocks
                req.next_seg = nseg
                req.computed = computed
                if not req.looked_up:
                    req.looked_up = True
                    req.hit_tokens = computed
                    self.stats.prefix_cache_queries += req.prompt_tokens
                    self.stats.prefix_cache_hits += computed
                if req.scheduled is None:
                    req.scheduled = self.now
                req.state = PREFILL
                self.running[req.request_id] = req
                self.prefilling[req.request_id] = req
                chunks.append((req, n))
                need += blocks
                budget -= n
        if not self.running:
            if self.errored:  # nothing to run, but rejections to report: an empty step
                p = _Pending()
                p.start, p.chunks, p.n_dec, p.prefill_tokens, p.t0, p.growth, p.k = self.now, (), 0, 0, 0.0, 0.0, 1
                p.end = self.now
                self.pending = p
                return p.end
            return None
        # allocate this step's blocks now (eviction of cached blocks if needed)
        self._make_room()
        if not chunks:
            return self._plan_decode_run(preempted, horizon, max_steps, self.used_blocks())
        p = _Pending()
        p.start = self.now
        p.chunks = chunks
        p.n_dec = n = self.n_dec
        f = self.slowdown
        if prof.noise_sigma > 0:
            f *= math.exp(self.rng.gauss(0.0, prof.noise_sigma))
        ptoks = sum(c for _, c in chunks)
        kv = self.sum_a + n * self.S + sum(r.computed + c for r, c in chunks)
        p.prefill_tokens = ptoks
        p.t0 = f * prof.step_time(ptoks, n, kv)
        p.growth = 0.0
        p.k = 1
        p.end = self.now + p.t0
        self.pending = p
        return p.end

    def _plan_decode_run(self, preempted: bool, horizon: float, max_steps: int | None, used: int) -> float:
        """Plan k identical-composition decode steps: up to the next finish, the next possible block
        shortage (each request opens at most one block per ``block`` steps), ``horizon``, ``max_steps``."""
        prof = self.profile
        n = self.n_dec
        p = _Pending()
        p.start = self.now
        p.chunks = ()
        p.n_dec = n
        f = self.slowdown
        if prof.noise_sigma > 0:
            f *= math.exp(self.rng.gauss(0.0, prof.noise_sigma))
        p.prefill_tokens = 0
        p.t0 = t0 = f * prof.step_time(0, n, self.sum_a + n * self.S)
        p.growth = growth = f * prof.kv_read_per_token_s * n
        k = 1 if preempted else (max_steps or 1 << 40)
        if k > 1:
            fs = self._next_finish_S()
            if fs is not None:
                k = min(k, max(1, fs - self.S))
            k = min(k, max(1, self.block * ((self.cap_eff - used) // n)))
            if horizon < math.inf and k > 1:
                k = min(k, self._steps_to_reach(t0, growth, horizon - self.now))
        p.k = k
        p.end = self.now + (k * t0 + growth * k * (k - 1) / 2)
        self.pending = p
        return p.end

    @staticmethod
    def _run_time(t0: float, growth: float, k: int) -> float:
        return k * t0 + growth * k * (k - 1) / 2

    @staticmethod
    def _steps_to_reach(t0: float, growth: float, dt: float) -> int:
        """Smallest k >= 1 with run_time(k) >= dt."""
        if dt <= t0:
            return 1
        if growth <= 1e-15:
            return max(1, math.ceil(dt / t0))
        # growth/2 k^2 + (t0 - growth/2) k - dt = 0
        a, bb = growth / 2, t0 - growth / 2
        k = math.ceil((-bb + math.sqrt(bb * bb + 4 * a * dt)) / (2 * a))
        while k > 1 and Engine._run_time(t0, growth, k - 1) >= dt:
            k -= 1
        while Engine._run_time(t0, growth, k) < dt:
            k += 1
        return max(1, k)

    # ------------------------------------------------------------------ execution
    def commit(self, until: float | None = None) -> list[EngineRequest]:
        """Apply the planned run: all of it, or (``until`` given) up to the first step boundary
        at or after ``until``. Advances ``self.now``. Returns the requests that finished, with
        ``finish_reason`` ``stop``/``length`` and timestamps set, and those rejected when the run
        was planned (``error``: a prompt that can never fit the KV cache, e.g. under ``kv_cut``).
        """
        p = self.pending
        if p is None:
            return []
        self.pending = None
        k = p.k
        if until is not None and k > 1 and until < p.end:
            k = min(k, self._steps_to_reach(p.t0, p.growth, until - p.start))
        st = self.stats
        n = p.n_dec
        self.now = p.start + self._run_time(p.t0, p.growth, k)
        now = self.now
        finished = self.errored  # requests rejected when this step was planned (finish reason "error")
        self.errored = []
        if n:
            self.S += k
            self.dec_now = self.dec_blocks(self.S) if k > 1 else self.dec_now + self.res[-self.S % self.block]
            st.generation_tokens += n * k
            st.itl.observe_series(p.t0, p.growth, k, n)
        if not st.detailed:
            pass
        elif p.chunks:
            st.iteration_tokens.observe(p.prefill_tokens + n)
        elif n:
            st.iteration_tokens.observe(n, k)
        # decode finishes
        heap = self.heap
        S = self.S
        while heap:
            fs, _, req, ver = heap[0]
            if req.state != DECODE or req.ver != ver:
                heapq.heappop(heap)
                continue
            if fs > S:
                break
            heapq.heappop(heap)
            req.out = req.out_entry + (S - req.s_entry)
            self._finish(req, now)
            finished.append(req)
        # prefill chunks
        b = self.block
        cache = self.cache
        for req, c in p.chunks:
            if req.state != PREFILL:
                continue
            before_blocks = req.own_blocks + req.shared_blocks
            req.computed += c
            total_blocks = -(-req.computed // b)
            grow = total_blocks - before_blocks
            if grow > 0:
                req.own_blocks += grow
                self.own_prefill += grow
            segs = req.segments
            while req.next_seg < len(segs) and segs[req.next_seg][1] <= req.computed:
                key, end = segs[req.next_seg]
                start = segs[req.next_seg - 1][1] if req.next_seg else 0
                nb = (end - start) // b
                if cache.enabled and cache.insert(key, nb):
                    req.seg_refs.append(key)
                    req.own_blocks -= nb
                    self.own_prefill -= nb
                    req.shared_blocks += nb
                req.next_seg += 1
            if req.computed >= req.target_len:
                del self.prefilling[req.request_id]
                st.generation_tokens += 1
                if req.first_token is None:
                    req.first_token = now
                    st.ttft.observe(now - req.arrival)
                    if not req.prompt_counted:
                        self._count_prompt(req)
                elif req.last_token is not None:
                    st.itl.observe(now - req.last_token)
                req.out += 1
                if req.out >= req.target_out:
                    self._enter_decode(req)  # then _finish releases it like a decoding request
                    self._finish(req, now)
                    finished.append(req)
                else:
                    self._enter_decode(req)
        return finished

    def _count_prompt(self, req: EngineRequest) -> None:
        """vLLM's prompt counters: the whole prompt (cached part included) and its cached part."""
        self.stats.prompt_tokens += req.prompt_tokens
        self.stats.prompt_tokens_cached += req.hit_tokens
        req.prompt_counted = True

    def _finish(self, req: EngineRequest, now: float) -> None:
        self._release(req)
        req.state = FINISHED
        req.finished = now
        req.last_token = now
        req.finish_reason = "length" if req.length_capped else "stop"
        self.by_id.pop(req.request_id, None)
        self._finish_stats(self.stats, req, now)

    @staticmethod
    def _finish_stats(st: EngineStats, req: EngineRequest, now: float) -> None:
        st.request_success[req.finish_reason] += 1
        st.e2e.observe(now - req.arrival)
        # queue, prefill and decode: the engine view's phase distribution reads the three together, so
        # they are observed for every finished request as vLLM does (never queue alone)
        st.queue.observe(req.scheduled - req.queued)
        st.prefill.observe(req.first_token - req.scheduled)
        st.decode.observe(now - req.first_token)
        if not st.detailed:
            return
        st.inference.observe(now - req.scheduled)
        if req.out > 1:
            st.tpot.observe((now - req.first_token) / (req.out - 1))
        st.request_prompt_tokens.observe(req.prompt_tokens)
        st.request_generation_tokens.observe(req.out)
        if req.max_tokens is not None:
            st.request_max_tokens.observe(req.max_tokens)
        st.request_preemptions.observe(req.preemptions)
        st.request_prefill_kv_computed.observe(req.prompt_tokens - req.hit_tokens)
        # Per client request (vLLM's parent request): n and the longest choice, once all n finished.
        fam = req.family
        if fam is None:
            st.request_n.observe(1)
            st.request_max_generation_tokens.observe(req.out)
        else:
            fam.left -= 1
            fam.max_out = max(fam.max_out, req.out)
            if fam.left == 0:
                st.request_n.observe(fam.n)
                st.request_max_generation_tokens.observe(fam.max_out)

    # ------------------------------------------------------------------ convenience
    def run_until_idle(self, max_time: float = math.inf) -> list[EngineRequest]:
        """Run all queued work to completion (tests, offline replay without new arrivals)."""
        done = []
        while True:
            end = self.plan()
            if end is None or end > max_time:
                break
            done.extend(self.commit())
        return done
