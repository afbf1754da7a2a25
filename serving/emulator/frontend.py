"""The API-server front end of a replica: a single-threaded server in front of the engine.

Where it sits: serving/emulator, used by the live server (``server.py``) and the virtual-time drivers
(``fleet_sim.py``, ``virtual.py``) to decide when an arriving request joins the engine's waiting queue.
Plain data, engine clock (seconds), no I/O.

vLLM's OpenAI server runs in one process (``vllm/entrypoints/openai/api_server.py``) apart from the
engine core (``vllm/v1/engine/core.py``): one asyncio thread receives the HTTP request, stamps its
arrival, tokenises it and hands it to the engine core over IPC, and processes every engine output
(detokenising, building the SSE chunk, usage, stats) of every running request after each step. So
the front end is one FIFO server whose work is

- ``frontend_input_s`` per request (input processing up to the hand-over, wall seconds on an idle
  host), after which the request joins the engine's waiting queue;
- ``frontend_per_token_s`` per output token (output processing, CPU seconds);

and an arrival waits behind the work already queued (other arrivals, the outputs of the last steps), as
does a step's output: vLLM's TTFT ends when the API server picks the first token up, so a request's
TTFT includes the front end's backlog at the end of its prefill step (``FrontEnd.outputs``).
The host's cores are shared: on the CPU build the engine's forward pass runs on the cores given to its
OpenMP threads while the engine-core process and the API server share the reserved core(s)
(``vllm/utils/ompmultiprocessing.py``: one reserved core per rank on x86; the engine core polls while
a step runs), so while the engine has work the front end runs at ``frontend_busy_share`` of its idle
speed (0.5: two processes on one reserved core).

With ``Profile.frontend_input_s`` None (the published GPU profiles) the model is off: a request joins
the queue the constant ``input_overhead_s`` after its arrival, and output work costs nothing.
"""

from __future__ import annotations

from serving.emulator.profiles import Profile


class FrontEnd:
    """One replica's front end as a FIFO server on the engine clock (see module doc).

    ``free_at``: engine-clock time (s) at which the work queued so far is done.
    """

    __slots__ = ("input_s", "per_token_s", "busy_share", "overhead_s", "free_at", "seen_tokens")

    def __init__(self, profile: Profile):
        self.input_s = profile.frontend_input_s
        self.per_token_s = profile.frontend_per_token_s
        self.busy_share = profile.frontend_busy_share
        self.overhead_s = profile.input_overhead_s
        self.free_at = 0.0
        self.seen_tokens = 0

    @property
    def modelled(self) -> bool:
        """False when the profile has no front-end term (constant ``input_overhead_s``)."""
        return self.input_s is not None

    def _serve(self, now: float, work_s: float, engine_busy: bool) -> float:
        start = max(now, self.free_at)
        self.free_at = start + work_s / (self.busy_share if engine_busy else 1.0)
        return self.free_at

    def admit(self, now: float, engine_busy: bool) -> float:
        """A request arrives at ``now`` (s): the engine-clock time (s) it joins the waiting queue.

        Model off: ``now + input_overhead_s``. On: after the work queued ahead of it and its own
        ``frontend_input_s``, slowed by ``frontend_busy_share`` while ``engine_busy``.
        """
        if self.input_s is None:
            return now + self.overhead_s
        return self._serve(now, self.input_s, engine_busy)

    def outputs(self, start: float, generated_total: int, engine_busy: bool) -> float:
        """The engine's counter of generated tokens reached ``generated_total``: queue the new tokens'
        processing (``frontend_per_token_s`` each), from ``start`` (s; the step's end, or the start of a
        run of steps committed at once) or when the queued work is done.

        Returns when the front end picks these outputs up (s): ``start``, or later when work is queued
        ahead of them. vLLM stamps a request's TTFT there (``IterationStats.iteration_timestamp``, taken
        by the API server when it processes the step's outputs: ``vllm/v1/metrics/stats.py``), not at the
        engine's step end. Model off (or no new tokens): ``start``, nothing queued."""
        new, self.seen_tokens = generated_total - self.seen_tokens, generated_total
        if self.input_s is None or new <= 0:
            return start
        pickup = max(start, self.free_at)
        if self.per_token_s > 0.0:
            self._serve(start, new * self.per_token_s, engine_busy)
        return pickup

    def reset(self, now: float) -> None:
        """A new engine (restart; its token counter starts at 0): nothing queued."""
        self.free_at = now
        self.seen_tokens = 0


def step_outputs(frontend: FrontEnd, engine, finished, engine_busy: bool, start: float | None = None) -> float:
    """After ``engine.commit()`` returned ``finished``: queue the committed steps' outputs on ``frontend``
    from ``start`` (s; default the step's end, ``engine.now``; the virtual-time driver passes the start of
    a run of steps committed at once) and set ``first_seen`` on every request whose first token the last
    step made: when the front end picks it up, not before that step's end. Returns that time (s, engine
    clock)."""
    picked = frontend.outputs(engine.now if start is None else start, engine.stats.generation_tokens, engine_busy)
    seen = max(engine.now, picked)
    for req in (*finished, *engine.running.values()):
        if req.first_token == engine.now and req.first_seen is None:
            req.first_seen = seen
    return seen
