"""Gateway overhead: infercost's gateway vs vllm-router vs direct-to-replica, alternated over rounds, one run.

Run:  PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_gateway.py            (about 3 minutes)
      PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_gateway.py --quick    (about 1.5 minutes)

vllm-router (PyPI ``vllm-router``, the Rust router in a Python launcher) is a benchmark-only
comparison, not a runtime dependency: the project's ``bench`` extra, which ``make setup`` installs
(by hand: ``.venv/bin/pip install -e '.[bench]'``). Without it the router rows are skipped.

Every round runs the three targets — ``direct`` (the load generator round-robins the replicas
itself), ``gateway`` (``infercost gateway``, spans ON, exported to a local OTLP sink that answers
200) and ``vllm-router`` (and with ``--floor`` ``passthrough``: uvicorn + aiohttp relaying bytes with
no gateway code, the libraries' own cost) — one after the other on the same upstreams, the order
rotated each round, so a load spike from other work on the machine hits every target alike. Per
target and round:

1. TTFT (request sent -> first chunk carrying a token) of streamed chat completions (32-word
   prompt, 16 output tokens) on 2 emulated vLLM replicas (``serving.emulator``, H100 /
   Llama-3.1-8B profile) at 1, 16 and 64 concurrent streams (closed loop). Added TTFT = the
   target's p50 minus direct's p50 of the same round.
2. Maximum requests/s: closed loop at 128 concurrent tiny streamed requests (1 output token) for a
   fixed time against a zero-work scripted upstream (``tests/stub_upstream.py``), so the proxy, not
   the engine model, is the limit; and the proxy's CPU per request: user + system CPU seconds of
   the proxy's process tree (/proc; vllm-router's Rust code runs inside its launcher process) over
   the requests served.

Reported: the median over rounds of each figure and of its ratio to direct in the same round, and
``uptime`` before and after (the machine is shared: figures are only comparable within one run).
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

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAILURES: dict[str, int] = {}  # failed requests of this run by cause, printed at the end
TTFT_STREAMS = (1, 16, 64)
RPS_STREAMS = 128
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

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
from tests.stub_upstream import Behaviour, StubUpstream
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

# ``--floor``: the libraries alone — uvicorn (the gateway's server settings) in front of an aiohttp
# session set up as the gateway's, relaying each upstream chunk as it arrives: no spans, parsing,
# admission, retries or timeouts. What the gateway's own code adds is gateway minus this.
PASSTHROUGH_SCRIPT = """
import itertools, sys
sys.path.insert(0, {root!r})
import aiohttp, uvicorn
from serving.gateway.server import _config, _settle_gc
from serving.gateway.sse import read_body
upstream = itertools.cycle({upstreams!r})
client = []
SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                client.append(aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0), trust_env=False,
                    auto_decompress=False, skip_auto_headers=("User-Agent",), cookie_jar=aiohttp.DummyCookieJar(),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=2.0, sock_read=None)))
            await send({{"type": message["type"] + ".complete"}})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["path"] == "/health":
        await send({{"type": "http.response.start", "status": 200, "headers": []}})
        await send({{"type": "http.response.body", "body": b"ok"}})
        return
    body = await read_body(receive)
    async with client[0].post(next(upstream) + scope["path"], data=body,
                              headers={{"content-type": "application/json"}}) as resp:
        await send({{"type": "http.response.start", "status": resp.status, "headers": SSE}})
        async for chunk in resp.content.iter_any():
            await send({{"type": "http.response.body", "body": chunk, "more_body": True}})
    await send({{"type": "http.response.body", "body": b"", "more_body": False}})

server = uvicorn.Server(_config(app, "127.0.0.1", {port}, "error"))
_settle_gc()
server.run()
"""

GATEWAY_SCRIPT = "import sys; sys.argv[0] = 'infercost'; from infercost.cli import main; sys.exit(main())"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float = 60.0) -> None:
    async def probe():
        async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
            return r.status

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if asyncio.run(probe()) < 500:
                return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {timeout_s} s")


def spawn_json(script: str) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen([PY, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env=ENV, start_new_session=True)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("helper process failed to start")
    return proc, json.loads(line)


def start_gateway(upstreams: list[str], otlp: str) -> tuple[subprocess.Popen, str]:
    """``infercost gateway`` of this checkout (PYTHONPATH=ROOT), spans exported to ``otlp``."""
    port = free_port()
    args = [PY, "-c", GATEWAY_SCRIPT, "gateway", "--port", str(port), "--policy", "round_robin",
            "--otlp-endpoint", otlp, "--queue-cap", "interactive=100000"]
    args += [f"--upstream=replica-{i}={u}" for i, u in enumerate(upstreams)]
    proc = subprocess.Popen(args, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/health")
    return proc, f"http://127.0.0.1:{port}"


def start_passthrough(upstreams: list[str]) -> tuple[subprocess.Popen, str]:
    """The libraries-only relay (``PASSTHROUGH_SCRIPT``) round-robining ``upstreams``."""
    port = free_port()
    proc = subprocess.Popen([PY, "-c", PASSTHROUGH_SCRIPT.format(root=str(ROOT), upstreams=upstreams, port=port)],
                            cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/health")
    return proc, f"http://127.0.0.1:{port}"


def start_vllm_router(upstreams: list[str]) -> tuple[subprocess.Popen | None, str | None, str]:
    exe = shutil.which("vllm-router", path=str(Path(PY).parent)) or shutil.which("vllm-router")
    if exe is None:
        return None, None, "vllm-router is not installed (make setup, or .venv/bin/pip install -e '.[bench]')"
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


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds (all threads) of process ``pid`` and its live descendants (Linux /proc)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    tree, frontier = {pid}, [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(ticks.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


# --- load generator (aiohttp: lighter than httpx, so more of the 2 cores go to the proxy) -----------

def body(max_tokens: int) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello " * 32}], "stream": True,
                       "max_tokens": max_tokens, "ignore_eos": True}).encode()


def _fail(cause: str) -> None:
    FAILURES[cause] = FAILURES.get(cause, 0) + 1


async def one_stream(session: aiohttp.ClientSession, url: str, payload: bytes) -> float | None:
    """TTFT in seconds (request sent -> first chunk with content), or None if the request failed."""
    started = time.perf_counter()
    ttft = None
    try:
        async with session.post(url + "/v1/chat/completions", data=payload,
                                headers={"content-type": "application/json"}) as resp:
            if resp.status != 200:
                await resp.read()
                _fail(f"http.{resp.status}")
                return None
            done = False
            async for line in resp.content:
                if ttft is None and line.startswith(b"data: {"):
                    compact = line.replace(b": ", b":")
                    if b'"content":"' in compact and b'"content":""' not in compact:
                        ttft = time.perf_counter() - started
                if line.startswith(b"data: [DONE]"):
                    done = True
            if not done:
                _fail("no_done")
                return None
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        _fail(type(exc).__name__)
        return None
    if ttft is None:
        _fail("no_token")
    return ttft


async def closed_loop(urls: list[str], concurrency: int, *, requests: int | None = None, seconds: float | None = None,
                      max_tokens: int = 16) -> dict:
    """``concurrency`` workers each sending streams back to back; urls round-robined per request."""
    payload = body(max_tokens)
    ttfts: list[float] = []
    failed = 0
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency + 8, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120),
                                     trust_env=False) as session:
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
                ttft = await one_stream(session, urls[i % len(urls)], payload)
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
    try:
        import uvloop  # the gateway's own loop; also keeps the load generator light
        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def overhead_buckets(gateway_url: str) -> list[tuple[float, float]]:
    """(upper bound s, cumulative count) of the gateway's infercost_gateway_overhead_seconds histogram."""
    async def scrape():
        async with aiohttp.ClientSession() as s, s.get(gateway_url + "/metrics") as r:
            return await r.text()
    out = []
    for line in asyncio.run(scrape()).splitlines():
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


def uptime() -> str:
    with open("/proc/loadavg") as fh:
        one, five, fifteen = fh.read().split()[:3]
    return f"load average {one}, {five}, {fifteen} ({os.cpu_count()} CPUs)"


def med(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, shorter runs (noisier)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3 with --quick, else 5)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--only", choices=("gateway", "vllm-router"), default=None,
                        help="skip the other proxy (profiling)")
    parser.add_argument("--floor", action="store_true",
                        help="also run 'passthrough': uvicorn + aiohttp relaying bytes, no gateway code (the "
                             "libraries' own cost)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    rps_seconds = 3.0 if args.quick else 6.0
    ttft_requests = {1: 16 if args.quick else 32, 16: 64 if args.quick else 128, 64: 128 if args.quick else 256}

    procs = []
    load_before = uptime()
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
        # (TTFT urls on emulated replicas, requests/s urls on zero-work stubs, proxy process or None)
        targets: dict[str, tuple[list[str], list[str], subprocess.Popen | None]] = {"direct": (replicas, stubs, None)}
        if args.only != "vllm-router":
            gw_proc, gw = start_gateway(replicas, otlp)
            gw_stub_proc, gw_stub = start_gateway(stubs, otlp)
            procs += [gw_proc, gw_stub_proc]
            targets["gateway"] = ([gw], [gw_stub], (gw_proc, gw_stub_proc))
        router_why = "--only gateway"
        if args.only != "gateway":
            router_proc, router, router_why = start_vllm_router(replicas)
            procs.append(router_proc)
            if router_proc:
                router_stub_proc, router_stub, router_why = start_vllm_router(stubs)
                procs.append(router_stub_proc)
                if router_stub_proc:
                    targets["vllm-router"] = ([router], [router_stub], (router_proc, router_stub_proc))
        if args.floor:
            pt_proc, pt = start_passthrough(replicas)
            pt_stub_proc, pt_stub = start_passthrough(stubs)
            procs += [pt_proc, pt_stub_proc]
            targets["passthrough"] = ([pt], [pt_stub], (pt_proc, pt_stub_proc))
        for ttft_urls, rps_urls, _ in targets.values():  # warm up every path (connections, caches)
            run(closed_loop(ttft_urls, 16, requests=64, max_tokens=2))
            run(closed_loop(rps_urls, 16, requests=256, max_tokens=1))

        names = list(targets)
        # per target: lists over rounds
        ttft = {(n, c): [] for n in names for c in TTFT_STREAMS}
        ttft_cpu = {(n, c): [] for n in names for c in TTFT_STREAMS}
        rps = {n: [] for n in names}
        cpu = {n: [] for n in names}
        internal = {c: [] for c in TTFT_STREAMS}
        for rnd in range(rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                ttft_urls, rps_urls, owners = targets[name]
                for conc in TTFT_STREAMS:
                    before_h = overhead_buckets(ttft_urls[0]) if name == "gateway" else None
                    before_cpu = tree_cpu_seconds(owners[0].pid) if owners else None
                    res = run(closed_loop(ttft_urls, conc, requests=ttft_requests[conc], max_tokens=16))
                    ttft[(name, conc)].append(res)
                    if owners and res["ok"]:
                        ttft_cpu[(name, conc)].append(1000 * (tree_cpu_seconds(owners[0].pid) - before_cpu) / res["ok"])
                    if before_h is not None:
                        after_h = overhead_buckets(ttft_urls[0])
                        internal[conc].append((1000 * quantile_from(before_h, after_h, 0.5),
                                               1000 * quantile_from(before_h, after_h, 0.99)))
                before_cpu = tree_cpu_seconds(owners[1].pid) if owners else None
                res = run(closed_loop(rps_urls, RPS_STREAMS, seconds=rps_seconds, max_tokens=1))
                rps[name].append(res)
                if owners and res["ok"]:
                    cpu[name].append(1000 * (tree_cpu_seconds(owners[1].pid) - before_cpu) / res["ok"])
            print(f"# round {rnd + 1}/{rounds} done ({' -> '.join(order)}); {uptime()}", file=sys.stderr, flush=True)
        load_after = uptime()

        print(f"# Gateway overhead benchmark: {args.replicas} emulated replicas (h100-llama-3.1-8b) and "
              f"{args.replicas} zero-work stubs; gateway spans ON; {rounds} rounds, targets alternated; medians.")
        print(f"# uptime before: {load_before}; after: {load_after}")
        if "vllm-router" not in targets:
            print(f"# vllm-router skipped: {router_why}")

        print(f"\n## Maximum requests/s ({RPS_STREAMS} concurrent streams, 1 output token, zero-work stub, "
              f"{rps_seconds:.0f} s per round)")
        print("| target | ok (sum) | failed (sum) | requests/s | x direct | proxy CPU ms/request |")
        print("|---|---|---|---|---|---|")
        for name in names:
            rs = rps[name]
            ratio = med(r["rps"] / d["rps"] for r, d in zip(rs, rps["direct"]) if d["rps"])
            c = f"{med(cpu[name]):.3f}" if cpu[name] else "-"
            print(f"| {name} | {sum(r['ok'] for r in rs)} | {sum(r['failed'] for r in rs)} | {med(r['rps'] for r in rs):.0f}"
                  f" | {ratio:.2f} | {c} |")

        print("\n## TTFT (streamed, 32-word prompt, 16 output tokens, emulated replicas), closed loop")
        print("| target | streams | ok (sum) | failed (sum) | p50 ms | p99 ms | added p50 ms | p50 x direct "
              "| proxy CPU ms/request |")
        print("|---|---|---|---|---|---|---|---|---|")
        added: dict[tuple[str, int], float] = {}
        for conc in TTFT_STREAMS:
            base = ttft[("direct", conc)]
            for name in names:
                rs = ttft[(name, conc)]
                added[(name, conc)] = med(r["p50_ms"] - b["p50_ms"] for r, b in zip(rs, base))
                ratio = med(r["p50_ms"] / b["p50_ms"] for r, b in zip(rs, base) if b["p50_ms"])
                c = f"{med(ttft_cpu[(name, conc)]):.3f}" if ttft_cpu[(name, conc)] else "-"
                print(f"| {name} | {conc} | {sum(r['ok'] for r in rs)} | {sum(r['failed'] for r in rs)} | "
                      f"{med(r['p50_ms'] for r in rs):.1f} | {med(r['p99_ms'] for r in rs):.1f} | "
                      f"{added[(name, conc)]:+.1f} | {ratio:.2f} | {c} |")

        if "gateway" in targets:
            print("\n## The gateway's own added latency (its infercost_gateway_overhead_seconds histogram: request in"
                  " -> upstream send, plus first upstream event -> relayed), interpolated within buckets")
            print("| streams | p50 ms | p99 ms |")
            print("|---|---|---|")
            for conc, vals in internal.items():
                print(f"| {conc} | {med(v[0] for v in vals):.3f} | {med(v[1] for v in vals):.3f} |")

        if "gateway" in targets and "vllm-router" in targets:
            print("\n## Gateway vs vllm-router (same run; against the goals)")
            g, r = med(x["rps"] for x in rps["gateway"]), med(x["rps"] for x in rps["vllm-router"])
            print(f"- requests/s: gateway / vllm-router = {g / r:.2f} (goal >= 1.00)")
            gc, rc = med(cpu["gateway"]), med(cpu["vllm-router"])
            print(f"- CPU per request: gateway / vllm-router = {gc / rc:.2f} (goal <= 1.20)")
            if "passthrough" in targets:
                pc = med(cpu["passthrough"])
                print(f"- CPU per request: passthrough (uvicorn + aiohttp alone) / vllm-router = {pc / rc:.2f}; "
                      f"gateway - passthrough = {gc - pc:.3f} ms (the gateway's own code, spans included)")
            for conc in TTFT_STREAMS:
                print(f"- {conc} streams: added p50 TTFT gateway {added[('gateway', conc)]:+.1f} ms, vllm-router "
                      f"{added[('vllm-router', conc)]:+.1f} ms (goal at 64: gateway <= vllm-router + 3 ms)")
        if FAILURES:
            print(f"- failed requests by cause (all targets): {FAILURES}")
        return 0
    finally:
        for p in reversed(procs):
            stop(p)


if __name__ == "__main__":
    sys.exit(main())
