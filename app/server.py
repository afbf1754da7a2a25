"""Serve the dashboard in-process: ``serve(store, host, port, block=True)``.

Streamlit's server runs inside the calling process and its page scripts run in threads of it, so
they share ``store`` (chDB allows one engine per process: the process that owns the embedded store
must serve the dashboard itself).

Two modes, and what the caller must do:

* ``block=True`` from the **main thread** (``infercost dashboard``; ``infercost up`` after starting
  its other parts in background threads): runs ``streamlit.web.bootstrap.run``, which installs
  SIGINT/SIGTERM handlers (signal handlers can only be installed from the main thread) and returns
  when the server stops (Ctrl-C / SIGTERM). Start everything else before calling it, and clean up
  after it returns.
* ``block=False`` (or any call from a non-main thread): starts Streamlit's ``Server`` on its own
  asyncio loop in a daemon thread named ``infercost-dashboard`` and returns a
  :class:`DashboardHandle` (``.url``, ``.stop()``, ``.wait()``) once the port is listening. No signal
  handlers are installed: the caller owns shutdown and must call ``.stop()``. Streamlit's
  configuration is process-global, so serve one dashboard per process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from app import store_provider

log = logging.getLogger(__name__)

MAIN_SCRIPT = str(Path(__file__).with_name("main.py"))


def _flag_options(host: str, port: int) -> dict:
    # Keys are Streamlit's config options with '.' written as '_' (the form `streamlit run` passes).
    return {
        "server_address": host,
        "server_port": int(port),
        "server_headless": True,
        "server_fileWatcherType": "none",
        "server_runOnSave": False,
        "browser_gatherUsageStats": False,
        "global_developmentMode": False,
        "client_toolbarMode": "viewer",
        # Viewers never see a traceback: pages show a short error with an id (app.ui.guarded) and the
        # traceback goes to the log; "none" covers anything that escapes that.
        "client_showErrorDetails": "none",
        "logger_hideWelcomeMessage": False,
        "theme_base": "light",
        **RUNNER_OPTIONS,
    }


# Two defaults of Streamlit's script runner that cost every page load and refresh here (measured on the
# live page, 7-day demo store, cProfile of the script thread): a full `gc.collect(2)` after each run,
# ~100 ms of CPU holding the GIL over this process's heap (pandas, Arrow, the embedded ClickHouse's
# Python side), on every 5 s refresh of every open live page too; and "magic" (bare expressions written
# to the page), an AST rewrite of main.py and the page, ~45 ms each time Streamlit's script cache is
# emptied, which it does whenever the last browser session disconnects (a reload by the only viewer).
# No page uses magic (tests/test_dashboard_server.py checks the scripts); Python's own generational GC still runs.
RUNNER_OPTIONS = {"runner_postScriptGC": False, "runner_magicEnabled": False}


@dataclass
class DashboardHandle:
    """A dashboard served from a background thread."""

    host: str
    port: int
    thread: threading.Thread
    _loop: asyncio.AbstractEventLoop | None = None
    _server: object | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and wait up to ``timeout`` seconds for its thread; idempotent."""
        if self._loop is not None and self._server is not None and self.thread.is_alive():
            self._loop.call_soon_threadsafe(self._server.stop)
        self.thread.join(timeout)

    def wait(self) -> None:
        """Block until the server stops."""
        self.thread.join()


def serve(store, host: str = "127.0.0.1", port: int = 8501, block: bool = True, *,
          otlp_endpoint: str | None = None, ready_timeout: float = 30.0, auth=None) -> DashboardHandle | None:
    """Serve the dashboard over ``store`` on ``host:port``.

    Args:
        store: a :class:`schema.store.Store`, shared with the page scripts.
        host, port: bind address (default 127.0.0.1:8501, Streamlit's port).
        block: run in the calling (main) thread until stopped; else in a background thread.
        otlp_endpoint: the URL shown in empty states ("point vLLM's --otlp-traces-endpoint at ...").
        ready_timeout: seconds to wait for the background server to listen.
        auth: an :class:`app.auth.AuthConfig` (token / basic gate); None = open (OIDC still applies when
            Streamlit's ``[auth]`` secrets are configured).

    Returns:
        None after a blocking run ends; a :class:`DashboardHandle` for ``block=False``.

    Raises:
        RuntimeError: the background server did not start (the cause is chained), e.g. the port is taken.
    """
    from streamlit.web import bootstrap

    from app import auth as auth_gate

    auth_gate.configure(auth)
    store_provider.set_store(store, otlp_endpoint=otlp_endpoint)
    flags = _flag_options(host, port)
    # Streamlit warns "an update to the [server] config option section was detected, restart" when its
    # config was read before (any st.* import does): not so here, the server has not started yet.
    config_log = logging.getLogger("streamlit.config")
    level = config_log.level
    config_log.setLevel(logging.ERROR)
    try:
        bootstrap.load_config_options(flag_options=flags)
    finally:
        config_log.setLevel(level)
    if block and threading.current_thread() is threading.main_thread():
        bootstrap.run(MAIN_SCRIPT, False, [], flags)
        return None

    handle = DashboardHandle(host=host, port=int(port), thread=threading.Thread())

    def _run() -> None:
        from streamlit.web.server import Server

        async def main() -> None:
            server = Server(MAIN_SCRIPT, False)
            handle._loop, handle._server = asyncio.get_running_loop(), server
            await server.start()
            handle._ready.set()
            await server.stopped

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the caller through the handle
            handle.error = exc
            log.exception("dashboard server stopped with an error")
        finally:
            handle._ready.set()

    bootstrap._fix_sys_path(MAIN_SCRIPT)
    if hasattr(bootstrap, "prepare_streamlit_environment"):  # MIME types, secrets: what `run` would do
        bootstrap.prepare_streamlit_environment(MAIN_SCRIPT)
    handle.thread = threading.Thread(target=_run, name="infercost-dashboard", daemon=True)
    handle.thread.start()
    if not handle._ready.wait(ready_timeout) or handle.error is not None:
        raise RuntimeError(f"dashboard did not start on {host}:{port}") from handle.error
    if block:
        handle.wait()
        return None
    return handle
