"""A request inside the engine model: its inputs, its lifecycle state and its timestamps.

Where it sits: serving/emulator; created by the drivers (server.py, fleet_sim.py, virtual.py),
mutated only by the engine (engine.py, static.py). States: WAITING -> PREFILL -> DECODE ->
FINISHED, and back to WAITING when preempted.
"""

from __future__ import annotations

WAITING, PREFILL, DECODE, FINISHED = 0, 1, 2, 3


class RequestFamily:
    """The n engine requests of one client request with ``n`` > 1 (vLLM's parallel sampling: a
    parent request fans out into n child requests, one ``llm_request`` span each). Per-parent
    statistics (``vllm:request_params_n``, ``vllm:request_max_num_generation_tokens``) are observed
    when the last child finishes."""

    __slots__ = ("n", "left", "max_out")

    def __init__(self, n: int):
        self.n = self.left = int(n)
        self.max_out = 0


class EngineRequest:
    """One request inside the engine.

    Inputs: ``request_id``, ``prompt_tokens``, ``output_tokens`` (tokens the model would generate
    before stopping), ``max_tokens`` (cap: finish reason ``length``), ``segments`` (prefix-cache
    segments, see kvcache.py), ``arrival`` (engine clock, s), ``meta`` (anything the driver needs).
    Timestamps filled by the engine (engine clock, s): ``scheduled`` (first scheduled),
    ``first_token``, ``last_token``, ``finished``; ``finish_reason``; ``out`` = tokens generated.
    ``first_seen`` (set by a driver with a front-end model): when the API server picked the first token up.
    """

    __slots__ = (
        "request_id", "prompt_tokens", "target_out", "length_capped", "max_tokens", "segments", "arrival",
        "meta", "state", "scheduled", "first_token", "first_seen", "last_token", "finished", "finish_reason", "out",
        "computed", "target_len", "own_blocks", "shared_blocks", "seg_refs", "next_seg", "looked_up",
        "hit_tokens", "queued", "handed_over", "a", "s_entry", "out_entry", "q", "r", "ver", "prompt_counted", "preemptions",
        "params", "family",
    )

    def __init__(self, request_id: str, prompt_tokens: int, output_tokens: int, *, max_tokens: int | None = None,
                 segments=(), arrival: float = 0.0, meta=None, params=None):
        if prompt_tokens < 1:
            raise ValueError(f"request {request_id}: prompt_tokens must be >= 1, got {prompt_tokens}")
        if output_tokens < 1:
            raise ValueError(f"request {request_id}: output_tokens must be >= 1, got {output_tokens}")
        self.request_id = request_id
        self.prompt_tokens = int(prompt_tokens)
        cap = max_tokens if max_tokens is not None else output_tokens
        self.length_capped = cap < output_tokens
        self.target_out = max(1, min(int(output_tokens), int(cap)))
        self.max_tokens = max_tokens
        self.segments = segments
        self.arrival = arrival
        self.queued = arrival  # vLLM's QUEUED event: the engine core took it in (engine.py sets it)
        self.handed_over = arrival  # when the API server handed it to the engine core
        self.meta = meta
        self.params = params or {}
        self.family = None  # a RequestFamily when this is one of the n choices of one client request
        self.state = WAITING
        self.scheduled = None
        self.first_token = None
        self.first_seen = None  # when the API server picked the first token up (frontend.py); None = first_token
        self.last_token = None
        self.finished = None
        self.finish_reason = None
        self.out = 0
        self.computed = 0
        self.target_len = self.prompt_tokens
        self.own_blocks = 0
        self.shared_blocks = 0
        self.seg_refs = []
        self.next_seg = 0
        self.looked_up = False
        self.hit_tokens = 0
        self.a = 0
        self.s_entry = 0
        self.out_entry = 0
        self.q = 0
        self.r = 0
        self.ver = 0
        self.prompt_counted = False
        self.preemptions = 0
