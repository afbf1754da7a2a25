"""The instrumented OpenAI-compatible gateway (``infercost gateway``). See :mod:`serving.gateway.proxy`."""

from serving.gateway.config import GatewayConfig, Upstream, parse_upstream
from serving.gateway.proxy import Gateway
from serving.gateway.server import ServerThread, serve

__all__ = ["Gateway", "GatewayConfig", "Upstream", "parse_upstream", "ServerThread", "serve"]
