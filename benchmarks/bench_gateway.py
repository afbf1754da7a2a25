"""Gateway overhead: infercost's gateway vs direct-to-replica vs vllm-router, on the same replicas, one run.

Run:  .venv/bin/python benchmarks/bench_gateway.py            (about 3 minutes)
      .venv/bin/python benchmarks/bench_gateway.py --quick    (about 1 minute, fewer requests)

vllm-router (PyPI ``vllm-router``, the Rust router) is a benchmark-only comparison, not a project
dependency: ``.venv/bin/pip install vllm-router``. Without it the router rows are skipped.

What it measures, each target fed by the same load generator:
1. Added latency to the first token: TTFT (request sent -> first chunk carrying a token) of
   streamed chat completions on 2 emulated vLLM replicas (``serving.emulator``, H100 / Llama-3.1-8B
   profile), at 1, 64 and 256 concurrent streams (closed loop); reported as p50/p99 and as the
   difference to direct-to-replica (the client round-robins the replicas itself). Because that
   difference also carries CPU contention between the processes, the gateway's own measurement of
   the latency it adds (``infercost_gateway_overhead_seconds``) is reported beside it.
2. Maximum requests/s: closed loop at 128 concurrent tiny streamed requests (1 output token) for a
   fixed time, against the emulated replicas and against a zero-work scripted upstream
   (``serving.gateway.stub``), so the proxy, not the engine model, is the limit.

Processes: replicas, the zero-work upstream, the gateway (``infercost gateway``, spans ON, exported
to a local OTLP sink that answers 200), vllm-router and the load generator each run in their own
process. All share this machine's cores — on the 2-core CI box also with other work — so the
figures are pessimistic and noisy; ratios measured in the same run are the meaningful part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAILURES: dict[str, int] = {}  # failed requests of this run by cause, printed at the end

REPLICAS_SCRIPT = """
import json, sys, time
sys.path.insert(0, {root!r})
from serving.emulator.live import start_replicas
fleet = start_replicas({n}, ids=[f"replica-{{i}}" for i in range({n})])
print(json.dumps([r.url for r in fleet]), flush=True)
sys.stdin.read()
fleet.stop()
"""

STUB_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from serving.gateway.server import ServerThread
from serving.gateway.stub import Behaviour, StubUpstream
stubs = [ServerThread(StubUpstream(f"stub-{{i}}", lambda req, h: Behaviour(tokens=req.get("max_tokens", 1))), log_level="error").start()
         for i in range({n})]
print(json.dumps([s.url for s in stubs]), flush=True)
sys.stdin.read()
"""

OTLP_SINK_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({{"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/x-protobuf")]}})
    await send({{"type": "http.response.body", "body": b""}})
uvicorn.run(app, host="127.0.0.1", port={port}, log_level="error", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {timeout_s} s")


def spawn_json(script: str) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen([PY, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, start_new_session=True)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("helper process failed to start")
    return proc, json.loads(line)


def start_gateway(upstreams: list[str], otlp: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [str(ROOT / ".venv" / "bin" / "infercost"), "gateway", "--port", str(port), "--policy", "round_robin",
            "--otlp-endpoint", otlp, "--queue-cap", "interactive=100000"]
    args += [f"--upstream=replica-{i}={u}" for i, u in enumerate(upstreams)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/health")
    return proc, f"http://127.0.0.1:{port}"


def start_vllm_router(upstreams: list[str]) -> tuple[subprocess.Popen | None, str | None, str]:
    exe = shutil.which("vllm-router", path=str(ROOT / ".venv" / "bin")) or shutil.which("vllm-router")
    if exe is None:
        return None, None, "vllm-router is not installed (.venv/bin/pip install vllm-router)"
    port, prom = free_port(), free_port()
    args = [exe, "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin", "--worker-urls", *upstreams,
            "--prometheus-port", str(prom), "--log-level", "error"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout_s=60)
    except RuntimeError:
        proc.kill()
        err = proc.stderr.read()[-400:] if proc.stderr else ""
        return None, None, f"vllm-router did not start: {err}"
    return proc, f"http://127.0.0.1:{port}", ""


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        if proc.stdin:
            proc.stdin.close()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (subprocess.TimeoutExpired, ProcessLookupError, OSError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- load generator -------------------------------------------------------------------------------

def body(max_tokens: int) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello " * 32}], "stream": True,
                       "max_tokens": max_tokens, "ignore_eos": True}).encode()


async def one_stream(client: httpx.AsyncClient, url: str, payload: bytes) -> float | None:
    """TTFT in seconds (request sent -> first chunk with content), or None if the request failed."""
    started = time.perf_counter()
    ttft = None
    try:
        async with client.stream("POST", url + "/v1/chat/completions", content=payload,
                                 headers={"content-type": "application/json"}) as resp:
            if resp.status_code != 200:
                await resp.aread()
                FAILURES[f"http.{resp.status_code}"] = FAILURES.get(f"http.{resp.status_code}", 0) + 1
                return None
            async for line in resp.aiter_lines():
                if ttft is None and line.startswith("data: {") and '"content":"' in line.replace(": ", ":") \
                        and '"content":""' not in line.replace(": ", ":"):
                    ttft = time.perf_counter() - started
                if line.startswith("data: [DONE]"):
                    break
    except httpx.HTTPError as exc:
        FAILURES[type(exc).__name__] = FAILURES.get(type(exc).__name__, 0) + 1
        return None
    if ttft is None:
        FAILURES["no_token"] = FAILURES.get("no_token", 0) + 1
    return ttft


async def closed_loop(urls: list[str], concurrency: int, *, requests: int | None = None, seconds: float | None = None,
                      max_tokens: int = 16) -> dict:
    """``concurrency`` workers each sending streams back to back; urls round-robined per request."""
    payload = body(max_tokens)
    ttfts: list[float] = []
    failed = 0
    sent = 0
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
        deadline = time.perf_counter() + seconds if seconds else None
        started = time.perf_counter()

        async def worker():
            nonlocal failed, sent
            while True:
                if requests is not None and sent >= requests:
                    return
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                i = sent
                sent += 1
                ttft = await one_stream(client, urls[i % len(urls)], payload)
                if ttft is None:
                    failed += 1
                else:
                    ttfts.append(ttft)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    ttfts.sort()
    return {"ok": len(ttfts), "failed": failed, "wall_s": wall, "rps": len(ttfts) / wall if wall else 0.0,
            "p50_ms": 1000 * statistics.median(ttfts) if ttfts else float("nan"),
            "p99_ms": 1000 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else float("nan")}


def run(coro):
    return asyncio.run(coro)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def overhead_buckets(gateway_url: str) -> list[tuple[float, float]]:
    """(upper bound s, cumulative count) of the gateway's infercost_gateway_overhead_seconds histogram."""
    out = []
    for line in httpx.get(gateway_url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("infercost_gateway_overhead_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    return out


def quantile_from(before, after, q: float) -> float:
    """Quantile (seconds) of the observations between two scrapes, linear within a bucket (Prometheus'
    histogram_quantile rule)."""
    deltas = [(b, a - c) for (b, a), (_, c) in zip(after, before)]
    total = deltas[-1][1]
    if total <= 0:
        return float("nan")
    rank, prev_bound, prev_count = q * total, 0.0, 0.0
    for bound, count in deltas:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / max(count - prev_count, 1e-12)
        prev_bound, prev_count = bound, count
    return prev_bound


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (noisier)")
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args()
    rounds = 3 if args.quick else 8
    rps_seconds = 4.0 if args.quick else 8.0

    procs = []
    try:
        otlp_port = free_port()
        sink = subprocess.Popen([PY, "-c", OTLP_SINK_SCRIPT.format(root=str(ROOT), port=otlp_port)], cwd=ROOT,
                                start_new_session=True)
        procs.append(sink)
        rep_proc, replicas = spawn_json(REPLICAS_SCRIPT.format(root=str(ROOT), n=args.replicas))
        procs.append(rep_proc)
        stub_proc, stubs = spawn_json(STUB_SCRIPT.format(root=str(ROOT), n=args.replicas))
        procs.append(stub_proc)
        otlp = f"http://127.0.0.1:{otlp_port}"
        gw_proc, gw = start_gateway(replicas, otlp)
        procs.append(gw_proc)
        gw_stub_proc, gw_stub = start_gateway(stubs, otlp)
        procs.append(gw_stub_proc)
        router_proc, router, router_why = start_vllm_router(replicas)
        procs.append(router_proc)
        router_stub_proc, router_stub, _ = start_vllm_router(stubs) if router_proc else (None, None, router_why)
        procs.append(router_stub_proc)

        targets = {"direct": replicas, "gateway": [gw]}
        if router:
            targets["vllm-router"] = [router]
        # Warm up every path (connections, imports, JIT-free but caches).
        for urls in targets.values():
            run(closed_loop(urls, 16, requests=64, max_tokens=2))

        print(f"# Gateway overhead benchmark ({args.replicas} emulated replicas, h100-llama-3.1-8b; "
              f"spans ON in the gateway). Shared CPU: figures are pessimistic.")
        if not router:
            print(f"# vllm-router skipped: {router_why}")
        ttft_rows, internal = {}, {}
        for conc in (1, 64, 256):
            for name, urls in targets.items():
                before = overhead_buckets(gw) if name == "gateway" else None
                n = 64 if conc == 1 else conc * rounds
                res = run(closed_loop(urls, conc, requests=n, max_tokens=16))
                ttft_rows[(name, conc)] = res
                if before is not None:
                    after = overhead_buckets(gw)
                    internal[conc] = (1000 * quantile_from(before, after, 0.5), 1000 * quantile_from(before, after, 0.99))
        print("\n## TTFT (streamed, 32-word prompt, 16 output tokens), closed loop")
        print("| target | streams | ok | failed | p50 ms | p99 ms | added p50 ms | added p99 ms |")
        print("|---|---|---|---|---|---|---|---|")
        for conc in (1, 64, 256):
            base = ttft_rows[("direct", conc)]
            for name in targets:
                r = ttft_rows[(name, conc)]
                print(f"| {name} | {conc} | {r['ok']} | {r['failed']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                      f"{r['p50_ms'] - base['p50_ms']:+.1f} | {r['p99_ms'] - base['p99_ms']:+.1f} |")

        print("\n## The gateway's own added latency (its infercost_gateway_overhead_seconds histogram: request in ->"
              " upstream send, plus first upstream event -> relayed), interpolated within buckets")
        print("| streams | p50 ms | p99 ms |")
        print("|---|---|---|")
        for conc, (p50, p99) in internal.items():
            print(f"| {conc} | {p50:.3f} | {p99:.3f} |")

        rps_targets = {"direct (emulated)": replicas, "gateway (emulated)": [gw]}
        if router:
            rps_targets["vllm-router (emulated)"] = [router]
        rps_targets["direct (zero-work stub)"] = stubs
        rps_targets["gateway (zero-work stub)"] = [gw_stub]
        if router_stub:
            rps_targets["vllm-router (zero-work stub)"] = [router_stub]
        rps, cpu_ms = {}, {}
        owners = {"gateway (emulated)": gw_proc, "gateway (zero-work stub)": gw_stub_proc,
                  "vllm-router (emulated)": router_proc, "vllm-router (zero-work stub)": router_stub_proc}
        for name, urls in rps_targets.items():
            proc = owners.get(name)
            before = cpu_seconds(proc.pid) if proc is not None else None
            rps[name] = run(closed_loop(urls, 128, seconds=rps_seconds, max_tokens=1))
            if before is not None and rps[name]["ok"]:
                # vllm-router's launcher is a Python process that execs/waits for the Rust router: its
                # own CPU is what /proc reports for that pid, so the router figure is indicative only.
                cpu_ms[name] = 1000 * (cpu_seconds(proc.pid) - before) / rps[name]["ok"]
        print(f"\n## Maximum requests/s (128 concurrent streams, 1 output token, {rps_seconds:.0f} s each)")
        print("| target | ok | failed | requests/s | proxy CPU ms/request |")
        print("|---|---|---|---|---|")
        for name, r in rps.items():
            cpu = f"{cpu_ms[name]:.2f}" if name in cpu_ms and name.startswith("gateway") else "-"
            print(f"| {name} | {r['ok']} | {r['failed']} | {r['rps']:.0f} | {cpu} |")
        print("\n## Ratios (same run)")
        for kind in ("emulated", "zero-work stub"):
            g, d = rps[f"gateway ({kind})"]["rps"], rps[f"direct ({kind})"]["rps"]
            line = f"- {kind}: gateway/direct requests/s = {g / d:.2f}"
            if f"vllm-router ({kind})" in rps:
                line += f"; gateway/vllm-router = {g / rps[f'vllm-router ({kind})']['rps']:.2f} (goal >= 0.50)"
            print(line)
        for conc in (1, 64, 256):
            added = ttft_rows[("gateway", conc)]["p50_ms"] - ttft_rows[("direct", conc)]["p50_ms"]
            line = (f"- {conc} streams: gateway added p50 TTFT = {added:+.1f} ms end to end, "
                    f"{internal[conc][0]:.3f} ms inside the gateway (goal <= 1 ms)")
            if router:
                line += (f"; vllm-router added p50 = "
                         f"{ttft_rows[('vllm-router', conc)]['p50_ms'] - ttft_rows[('direct', conc)]['p50_ms']:+.1f} ms")
            print(line)
        if FAILURES:
            print(f"- failed requests by cause (all targets): {FAILURES}")
        outcomes = [line for line in httpx.get(gw + "/metrics", timeout=10).text.splitlines()
                    if line.startswith(("infercost_gateway_requests_total", "infercost_gateway_retries"))]
        print("- gateway counters: " + "; ".join(outcomes))
        return 0
    finally:
        for p in reversed(procs):
            stop(p)


if __name__ == "__main__":
    sys.exit(main())
