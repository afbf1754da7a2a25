"""The production deployment files parse and wire the parts as the README says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[1] / "docker"


def _compose():
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


def test_compose_services_and_dependencies():
    services = _compose()["services"]
    assert {"clickhouse", "migrate", "otel-collector", "vllm-0", "gateway", "infercost", "infercost-receiver"} <= set(services)
    assert services["clickhouse"]["image"].startswith("clickhouse/clickhouse-server:")
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    assert services["migrate"]["command"] == ["infercost", "migrate"]
    # Nothing writes before the schema exists.
    for name in ("otel-collector", "infercost", "infercost-receiver"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["infercost-receiver"]["profiles"] == ["own-receiver"]


def test_vllm_has_tracing_on_and_names_its_replica():
    vllm = _compose()["services"]["vllm-0"]
    assert any(arg.startswith("--otlp-traces-endpoint=http://otel-collector:4318") for arg in vllm["command"])
    env = vllm["environment"]
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    attrs = dict(kv.split("=", 1) for kv in env["OTEL_RESOURCE_ATTRIBUTES"].split(","))
    assert attrs["service.instance.id"] == "vllm-0" and attrs["gpu.type"] == "H100" and attrs["gpu.count"] == "1"
    # the README's required flags: prefix caching on, cached tokens reported in responses
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(vllm["command"])
    # the gateway names the replica by the same id (without one it would be "vllm-0:8000")
    gateway = _compose()["services"]["gateway"]["command"]
    assert gateway[gateway.index("--upstream") + 1] == "vllm-0=http://vllm-0:8000"


def test_collector_writes_our_tables_without_creating_schema():
    config = yaml.safe_load((DOCKER / "otel-collector.yaml").read_text())
    exporter = config["exporters"]["clickhouse"]
    assert exporter["create_schema"] is False
    assert exporter["database"] == "infercost"
    assert exporter["traces_table_name"] == "otel_traces"
    assert {k: v["name"] for k, v in exporter["metrics_tables"].items()} == {
        "gauge": "otel_metrics_gauge", "sum": "otel_metrics_sum", "histogram": "otel_metrics_histogram"}
    # Back-pressure, not drops, when ClickHouse is slow.
    assert exporter["sending_queue"]["block_on_overflow"] is True
    assert exporter["sending_queue"]["batch"]["min_size"] >= 5000
    pipelines = config["service"]["pipelines"]
    assert pipelines["traces"]["receivers"] == ["otlp"] and pipelines["traces"]["exporters"] == ["clickhouse"]
    assert "prometheus" in pipelines["metrics"]["receivers"]
    scrape = config["receivers"]["prometheus"]["config"]["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == ["vllm-0:8000"]
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")


def test_dockerfile_installs_every_package():
    text = (DOCKER / "Dockerfile").read_text()
    for package in ("infercost", "serving", "collectors", "schema", "alerts", "app"):
        assert f"COPY {package} ./{package}" in text


def test_compose_fleet_file_is_valid_and_prices_the_compose_replica():
    from schema.fleet import load_fleet

    fleet = load_fleet(DOCKER / "fleet.yaml")
    assert set(fleet.replicas) == {"vllm-0"}
    assert fleet.gpu_types["H100"].prices[0].usd_per_gpu_hour == 3.60


def _grafana_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_dashboard", DOCKER / "grafana" / "build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grafana_is_provisioned_with_the_clickhouse_source_and_the_dashboard():
    import json

    services = _compose()["services"]
    grafana = services["grafana"]
    assert "grafana-clickhouse-datasource" in grafana["environment"]["GF_INSTALL_PLUGINS"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in grafana["volumes"] if m.startswith("./")}
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    assert mounts["/var/lib/grafana/dashboards"] == "./grafana/dashboards"
    source = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/clickhouse.yaml").read_text())["datasources"][0]
    assert source["type"] == "grafana-clickhouse-datasource" and source["jsonData"]["host"] == "clickhouse"
    assert source["jsonData"]["defaultDatabase"] == "infercost" and source["jsonData"]["protocol"] == "http"
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/infercost.yaml").read_text())["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    board = json.loads((DOCKER / "grafana/dashboards/infercost.json").read_text())
    assert (DOCKER / "grafana/dashboards/infercost.json").read_text() == _grafana_module().render()  # regenerated
    uids = {t["datasource"]["uid"] for p in board["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
    # the dashboard and the query API never run unauthenticated on 0.0.0.0
    env = services["infercost"]["environment"]
    assert env["INFERCOST_DASHBOARD_HOST"] == "0.0.0.0" and env["INFERCOST_AUTH_TOKEN"].startswith("${INFERCOST_AUTH_TOKEN:?")


def test_every_grafana_panel_query_runs_on_the_store(store):
    """Each panel's SQL, with Grafana's ClickHouse macros expanded as the plugin does, runs on our schema
    (an empty store: the columns and functions must exist; values are the pages' own queries')."""
    import re

    board = _grafana_module().dashboard()
    queries = [t["rawSql"] for p in board["panels"] for t in p["targets"]]
    queries.append(board["annotations"]["list"][0]["target"]["rawSql"])
    frm, to = "toDateTime64('2026-11-02 10:00:00', 3)", "toDateTime64('2026-11-02 11:00:00', 3)"
    for sql in queries:
        expanded = re.sub(r"\$__timeFilter\((\w+)\)", rf"\1 >= {frm} AND \1 <= {to}", sql)
        expanded = re.sub(r"\$__timeInterval\((\w+)\)", r"toStartOfInterval(\1, INTERVAL 60 second)", expanded)
        expanded = expanded.replace("$__interval_s", "60").replace("$__fromTime", frm).replace("$__toTime", to)
        assert "$__" not in expanded
        store.query(expanded, tag="test.grafana")


def test_clickhouse_system_logs_are_bounded_or_off():
    import xml.etree.ElementTree as ET

    clickhouse = _compose()["services"]["clickhouse"]
    assert "./clickhouse/system-logs.xml:/etc/clickhouse-server/config.d/system-logs.xml:ro" in clickhouse["volumes"]
    root = ET.parse(DOCKER / "clickhouse" / "system-logs.xml").getroot()
    kept = {e.tag: e.findtext("ttl") for e in root if e.get("remove") != "1"}
    removed = {e.tag for e in root if e.get("remove") == "1"}
    assert all(ttl and "DELETE" in ttl and "INTERVAL" in ttl for ttl in kept.values()), kept
    # the logs that grow while idle (one row per second or per thread) are never kept unbounded
    assert {"metric_log", "asynchronous_metric_log", "trace_log", "text_log", "query_thread_log",
            "processors_profile_log"} <= removed
    assert {"query_log", "part_log"} <= set(kept)


def test_collector_inserts_synchronously_so_retries_deduplicate():
    config = yaml.safe_load((DOCKER / "otel-collector.yaml").read_text())
    assert config["exporters"]["clickhouse"]["async_insert"] is False


SECRETS = ("CLICKHOUSE_PASSWORD", "INFERCOST_INGEST_TOKEN", "INFERCOST_AUTH_TOKEN", "GRAFANA_ADMIN_PASSWORD")


def test_compose_requires_every_secret_and_ships_none():
    """Every password and token comes from the operator: each reference is ``${VAR:?message}``, so compose
    refuses to start while one is unset or empty (no ``${VAR:-default}``, no literal example value)."""
    text = (DOCKER / "docker-compose.yml").read_text()
    references = re.findall(r"\$\{(\w+)(:?[-?+]?)([^}]*)\}", text)
    for name in SECRETS:
        forms = {op for var, op, _ in references if var == name}
        assert forms == {":?"}, (name, forms)
    from infercost.settings import PLACEHOLDER_SECRETS

    values = yaml.safe_dump(_compose()).lower()  # every value, no comment
    assert not [p for p in PLACEHOLDER_SECRETS if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", values)]
    services = _compose()["services"]
    required = lambda name: f"${{{name}:?"  # noqa: E731
    assert services["clickhouse"]["environment"]["CLICKHOUSE_PASSWORD"].startswith(required("CLICKHOUSE_PASSWORD"))
    assert required("CLICKHOUSE_PASSWORD") in services["migrate"]["environment"]["INFERCOST_CLICKHOUSE_URL"]
    for name in ("otel-collector", "grafana"):
        assert services[name]["environment"]["CLICKHOUSE_PASSWORD"].startswith(required("CLICKHOUSE_PASSWORD"))
    # the span receivers require the ingest token: infercost's own, and the collector's OTLP receivers
    receiver = services["infercost-receiver"]["environment"]
    assert receiver["INFERCOST_INGEST_TOKEN"].startswith(required("INFERCOST_INGEST_TOKEN"))
    assert services["otel-collector"]["environment"]["INFERCOST_INGEST_TOKEN"].startswith(required("INFERCOST_INGEST_TOKEN"))
    config = yaml.safe_load((DOCKER / "otel-collector.yaml").read_text())
    assert config["extensions"]["bearertokenauth"]["token"] == "${env:INFERCOST_INGEST_TOKEN}"
    assert "bearertokenauth" in config["service"]["extensions"]
    for protocol in ("grpc", "http"):
        assert config["receivers"]["otlp"]["protocols"][protocol]["auth"] == {"authenticator": "bearertokenauth"}
    # ... and every span sender presents it (OTel's standard exporter variable, value URL-encoded)
    for name in ("vllm-0", "gateway"):
        headers = services[name]["environment"]["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
        assert headers == "Authorization=Bearer%20${INFERCOST_INGEST_TOKEN:?set INFERCOST_INGEST_TOKEN}", name
    gateway = services["gateway"]["command"]
    assert gateway[gateway.index("--otlp-endpoint") + 1] == "http://otel-collector:4318"


def test_the_senders_header_setting_passes_the_receivers_token(store, tmp_path, monkeypatch):
    """The compose file's OTEL_EXPORTER_OTLP_TRACES_HEADERS, read by the OTel SDK's own OTLP exporter (as in
    vLLM and the gateway), passes infercost's receiver's token check; without it the receiver answers 401."""
    from collectors.receiver import Receiver, ReceiverConfig
    from serving.sdk.telemetry import make_tracer_provider

    token = "0f3a9c5e7b2d4a6c8e1f3b5d7a9c2e4f"
    headers = _compose()["services"]["gateway"]["environment"]["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
    receiver = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", ingest_token=token,
                                       batch_max_seconds=0.05), store).start()
    try:
        for sent in ("", re.sub(r"\$\{INFERCOST_INGEST_TOKEN:\?[^}]*\}", token, headers)):
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", sent)
            provider = make_tracer_provider("infercost-gateway", otlp_endpoint=receiver.url, batch=False)
            provider.get_tracer("test").start_span("gateway chat").end()
            provider.shutdown()
        assert receiver.flush(10)
        assert receiver.stats.requests == {"/v1/traces 401": 1, "/v1/traces 200": 1}
        assert receiver.stats.stored == 1
    finally:
        receiver.stop()


@pytest.mark.parametrize("env, refused", [
    ({"INFERCOST_CLICKHOUSE_URL": "http://infercost:change-me@127.0.0.1:1/infercost"}, "password is a placeholder"),
    ({"INFERCOST_INGEST_TOKEN": "change-me"}, "INFERCOST_INGEST_TOKEN: the token is a placeholder"),
    ({"INFERCOST_AUTH_TOKEN": "Password"}, "the token is a placeholder"),
    ({}, "refusing to receive spans on 0.0.0.0 (not loopback) without a token"),
])
@pytest.mark.parametrize("command", [["up", "--no-alerts"], ["collector"]])
def test_the_services_refuse_a_placeholder_secret_or_an_open_receiver(command, env, refused, tmp_path, monkeypatch):
    """``infercost up`` and the receiver (``infercost collector``) refuse to start with an example value as
    the store password or a token, and receive on a non-loopback address only with an ingest token (as
    the dashboard refuses an open bind). Each refusal happens before anything is opened or bound."""
    from click.testing import CliRunner

    from infercost.cli import main

    for name in ("INFERCOST_CLICKHOUSE_URL", "INFERCOST_INGEST_TOKEN", "INFERCOST_AUTH_TOKEN",
                 "INFERCOST_ALLOW_UNAUTHENTICATED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("INFERCOST_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("INFERCOST_RECEIVER_HOST", "0.0.0.0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, command)
    assert result.exit_code != 0 and refused in result.output, result.output
    assert "infercost:change-me@" not in result.output  # the store URL's password is never shown
    assert not (tmp_path / "data" / "clickhouse").exists()
