"""Replica load for ``least_loaded``: poll each replica's Prometheus ``/metrics``.

Position: serving (gateway). Reads only ``vllm:num_requests_waiting`` and
``vllm:num_requests_running`` (gauges, summed over their ``model_name``/``engine`` labels; names
from shared/reference/vllm-telemetry.md). A line scan, not a full exposition parser: the page of a
real vLLM is ~100 KB and this runs every ``interval_s`` per replica.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

log = logging.getLogger(__name__)

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"


def parse_load(text: str) -> tuple[float, float]:
    """Prometheus text -> (waiting, running), each summed over label sets; missing metrics count 0."""
    waiting = running = 0.0
    for line in text.splitlines():
        if not line.startswith("vllm:num_requests_"):
            continue
        # "name{labels} value [timestamp]"; label values may hold spaces, so cut at the last '}'.
        name = line.split("{", 1)[0].split(" ", 1)[0]
        rest = line.rsplit("}", 1)[1].split() if "}" in line else line.split()[1:]
        try:
            value = float(rest[0])
        except (ValueError, IndexError):
            continue
        if name == WAITING:
            waiting += value
        elif name == RUNNING:
            running += value
    return waiting, running


async def scrape_once(client: aiohttp.ClientSession, router, timeout_s: float = 1.0) -> None:
    """Scrape every replica once, concurrently; a failed scrape keeps the previous values."""

    async def one(replica):
        try:
            async with client.get(replica.upstream.url + "/metrics",
                                  timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status == 200:
                    waiting, running = parse_load(await resp.text())
                    router.update_scrape(replica.replica_id, waiting, running)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.debug("scrape of %s failed: %r", replica.replica_id, exc)

    await asyncio.gather(*(one(r) for r in router.replicas))


async def scrape_loop(client: aiohttp.ClientSession, router, interval_s: float) -> None:
    """Scrape every ``interval_s`` seconds until cancelled."""
    while True:
        await scrape_once(client, router, timeout_s=min(1.0, interval_s * 2))
        await asyncio.sleep(interval_s)
