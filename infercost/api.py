"""The read-only HTTP query API (``/api/v1``) and the Prometheus export of the cost figures (``/metrics``).

Served by the process that owns the store (``infercost up``, ``infercost demo``) so that other
processes — the CLI while the embedded store is locked, a peer's script, Prometheus — read the same
figures without opening the store. Every answer comes from a named query (``schema.queries``);
nothing here computes a figure. JSON, UTC ISO-8601 times, money in USD, ``null`` for "no data".

Endpoints (all GET; the path is versioned, fields are only ever added within a version):

=================================  ===================================================================
``/api/v1``                         version, store (credentials redacted), endpoints
``/api/v1/summary``                 ``cost.period_summary``; ``since=24h`` or ``start=&end=``, ``by=``,
                                    ``model=``, ``tenant=``, ``task_type=``
``/api/v1/tasks``                   ``cost.tasks_table``; range as above, ``search=``, ``limit=`` (<= 10000)
``/api/v1/tasks/<task_id>``         ``tasks.task_detail``: the task's row and its calls
``/api/v1/calls?task_id=``          ``cost.task_calls``
``/api/v1/alerts``                  ``alerts.alerts_in_period``; range as above
``/api/v1/review?week=2026-W48``    the weekly review: Markdown, HTML and its headline figures
``/metrics``                        Prometheus text: spend rate, CPST, waste ... (:mod:`infercost.costmetrics`)
=================================  ===================================================================

Errors: 400 ``{"error": ...}`` for bad parameters, 404 for an unknown task, 503 when the store fails
(message redacted, the traceback logged with an id that the answer quotes).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
from datetime import date, datetime, timedelta, timezone

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from schema.redact import bearer_matches, redact

log = logging.getLogger(__name__)

API_VERSION = 1
PREFIX = f"/api/v{API_VERSION}"
MAX_LIMIT = 10_000
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class BadRequest(ValueError):
    """A parameter the API cannot use; the message says which and what it accepts."""


def _jsonable(value):
    if value is None:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime, date)):
        if isinstance(value, datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.isoformat()
    if hasattr(value, "isoformat"):  # pandas Timestamp
        return None if str(value) == "NaT" else _jsonable(value.to_pydatetime())
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def records(df) -> list[dict]:
    """A DataFrame as JSON-safe records (NaN -> null, times -> ISO 8601 UTC)."""
    if df is None or not len(df):
        return []
    return [_jsonable(r) for r in df.to_dict("records")]


def period(params, now: datetime | None = None, default: str = "24h") -> tuple[datetime, datetime]:
    """``(start, end)`` from ``since=24h`` (30m, 7d, 2w) or ``start=``/``end=`` (ISO 8601, UTC if naive)."""
    now = now or datetime.now(timezone.utc)
    if params.get("start") or params.get("end"):
        try:
            start = _parse_time(params["start"]) if params.get("start") else None
            end = _parse_time(params["end"]) if params.get("end") else now
        except (ValueError, KeyError) as exc:
            raise BadRequest(f"start/end must be ISO 8601 times (e.g. 2026-11-02T10:00:00Z): {exc}") from exc
        if start is None:
            raise BadRequest("end= needs start=")
    else:
        text = (params.get("since") or default).strip().lower()
        try:
            seconds = float(text[:-1]) * _UNITS[text[-1]]
        except (KeyError, ValueError, IndexError):
            raise BadRequest(f"since={text!r}: expected a duration like 30m, 24h, 7d or 2w") from None
        if seconds <= 0:
            raise BadRequest(f"since={text!r} must be positive")
        end, start = now, now - timedelta(seconds=seconds)
    if start >= end:
        raise BadRequest(f"start {start.isoformat()} is not before end {end.isoformat()}")
    return start, end


def _parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _filters(params) -> dict:
    return {k: params.get(k, "") for k in ("model", "tenant", "task_type")}


def _window(start, end) -> dict:
    return {"start": _jsonable(start), "end": _jsonable(end)}


class QueryAPI:
    """The Starlette app over ``store``; ``extra_routes`` are mounted beside (e.g. ``/metrics``)."""

    def __init__(self, store, *, token: str = "", metrics=None):
        self.store = store
        self.token = token
        self.metrics = metrics  # callable() -> Prometheus text, or None

    # -------------------------------------------------------------------------------- handlers
    def index(self, params, path_params):
        return {"version": API_VERSION, "store": redact(getattr(getattr(self.store, "url", None), "dsn", "")
                                                        or getattr(getattr(self.store, "url", None), "path", "")),
                "endpoints": [f"{PREFIX}/summary", f"{PREFIX}/tasks", f"{PREFIX}/tasks/<task_id>",
                              f"{PREFIX}/calls?task_id=", f"{PREFIX}/alerts", f"{PREFIX}/review?week=", "/metrics"]}

    def summary(self, params, path_params):
        from schema.queries import cost

        start, end = period(params)
        by = params.get("by") or None
        try:
            df = cost.period_summary(self.store, start, end, by=by, filters=_filters(params))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return {**_window(start, end), "by": by or "", "rows": records(df)}

    def tasks(self, params, path_params):
        from schema.queries import cost

        start, end = period(params)
        try:
            limit = int(params.get("limit") or 200)
        except ValueError:
            raise BadRequest(f"limit={params.get('limit')!r}: expected an integer") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise BadRequest(f"limit must be in 1..{MAX_LIMIT}")
        df = cost.tasks_table(self.store, start, end, params.get("search") or None, limit)
        return {**_window(start, end), "rows": records(df)}

    def task(self, params, path_params):
        from schema.queries.tasks import task_detail

        row, calls = task_detail(self.store, path_params["task_id"])
        if row is None and not len(calls):
            return JSONResponse({"error": f"no task {path_params['task_id']!r} in the store"}, status_code=404)
        return {"task": _jsonable(row), "calls": records(calls)}

    def calls(self, params, path_params):
        from schema.queries import cost

        if not params.get("task_id"):
            raise BadRequest("task_id= is required")
        return {"task_id": params["task_id"], "rows": records(cost.task_calls(self.store, params["task_id"]))}

    def alerts(self, params, path_params):
        from schema.queries import alerts

        start, end = period(params, default="7d")
        return {**_window(start, end), "rows": records(alerts.alerts_in_period(self.store, start, end))}

    def review(self, params, path_params):
        from app.review import BadWeek, build_review, last_complete_week, parse_week, render_html, render_markdown

        try:
            week = parse_week(params["week"]) if params.get("week") else last_complete_week(datetime.now(timezone.utc))
        except BadWeek as exc:
            raise BadRequest(str(exc)) from exc
        review = build_review(self.store, week)
        h = review.headline
        headline = {name: {"this": fig.this, "last": fig.last} for name, fig in vars(h).items()}
        return {"week": week.label, "start": _jsonable(week.start), "end": _jsonable(week.end),
                "empty": review.empty, "headline": _jsonable(headline),
                "coverage": _jsonable(vars(review.coverage)) if getattr(review, "coverage", None) else None,
                "markdown": render_markdown(review), "html": render_html(review)}

    # -------------------------------------------------------------------------------- plumbing
    def _authorised(self, request: Request) -> bool:
        if not self.token:
            return True
        return bearer_matches(request.headers.get("authorization"), self.token)

    def _endpoint(self, handler):
        async def endpoint(request: Request):
            if not self._authorised(request):
                return JSONResponse({"error": "missing or wrong 'Authorization: Bearer <token>'"}, status_code=401)
            params = dict(request.query_params)
            try:
                import asyncio

                result = await asyncio.to_thread(handler, params, dict(request.path_params))
            except BadRequest as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except Exception as exc:  # noqa: BLE001 - the viewer gets an id, the log the traceback
                error_id = secrets.token_hex(4)
                log.exception("query API %s failed (error id %s)", request.url.path, error_id)
                return JSONResponse({"error": f"the store did not answer ({redact(type(exc).__name__)}); "
                                              f"error id {error_id} in the service log"}, status_code=503)
            if isinstance(result, Response):
                return result
            return Response(json.dumps(result, allow_nan=False), media_type="application/json")
        return endpoint

    async def _metrics(self, request: Request):
        if not self._authorised(request):
            return Response("unauthorised\n", status_code=401)
        if self.metrics is None:
            return Response("# no cost metrics in this process\n", media_type="text/plain")
        import asyncio

        text = await asyncio.to_thread(self.metrics)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    def app(self) -> Starlette:
        routes = [Route(PREFIX, self._endpoint(self.index)), Route(PREFIX + "/", self._endpoint(self.index))]
        for path, handler in (("/summary", self.summary), ("/tasks", self.tasks), ("/tasks/{task_id:path}", self.task),
                              ("/calls", self.calls), ("/alerts", self.alerts), ("/review", self.review)):
            routes.append(Route(PREFIX + path, self._endpoint(handler)))
        routes.append(Route("/metrics", self._metrics))
        return Starlette(routes=routes)


class APIServer:
    """:class:`QueryAPI` served by uvicorn on a daemon thread (``infercost-api``); ``port=0`` picks a free port."""

    def __init__(self, api: QueryAPI, host: str = "127.0.0.1", port: int = 0):
        self.api, self.host, self.port = api, host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{PREFIX}"

    def start(self, timeout: float = 10.0) -> "APIServer":
        import socket

        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.api.app(), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="infercost-api",
                                        daemon=True)
        self._thread.start()
        import time

        deadline = time.monotonic() + timeout
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self._server.started:
            raise RuntimeError(f"the query API did not start on {self.host}:{self.port}")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
