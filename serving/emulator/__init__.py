"""The vLLM engine emulator: a stand-in for a vLLM replica where there is no GPU.

- ``engine.Engine``: iteration-level (continuous) batching over a paged KV cache with prefix
  caching and preemption by recompute, as vLLM V1 schedules it; ``static.StaticEngine`` for
  comparison. Timing from ``profiles.PROFILES`` (H100/A100 + Llama-3.1-8B, 4xH100 + 70B).
- Live mode: ``live.start_replicas(n, profile, base_port=0, otlp_endpoint=None, faults=None)``
  serves vLLM's OpenAI-compatible API, ``/metrics`` and ``llm_request`` spans (server.py).
- Virtual time: ``fleet_sim.simulate(plans, fleet, ...)`` runs a whole tier (gateway, clients,
  retries, faults) on a simulated clock and emits OTLP spans and metric points to a sink.

Imports nothing above ``serving`` except ``schema.semconv`` (attribute-name constants).
"""
