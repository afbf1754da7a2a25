"""The production deployment files parse and wire the parts as the README says."""

from __future__ import annotations

from pathlib import Path

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
