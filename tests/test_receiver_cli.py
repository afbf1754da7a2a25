"""``infercost collector`` wiring: settings -> ReceiverConfig, --scrape parsing."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from infercost.commands.collector import parse_scrape, receiver_config
from infercost.settings import Settings


def test_receiver_config_from_settings():
    settings = Settings(data_dir=Path("/var/lib/ic"), ingest_token="t", batch_max_rows=7, queue_max_rows=9,
                        spool_max_bytes=1234, max_body_bytes=4096, max_attribute_bytes=1000, batch_cap_rows=50,
                        batch_cap_bytes=4321)
    config = receiver_config(settings, port=0)
    assert (config.host, config.port, config.ingest_token, config.batch_max_rows, config.queue_max_rows) == (
        "127.0.0.1", 0, "t", 7, 9)
    assert (config.spool_dir, config.spool_max_bytes, config.max_body_bytes, config.max_attribute_bytes) == (
        Path("/var/lib/ic/spool"), 1234, 4096, 1000)
    assert (config.batch_cap_rows, config.batch_cap_bytes) == (50, 4321)
    assert receiver_config(settings).port == 4318


def test_parse_scrape():
    target = parse_scrape("http://127.0.0.1:8000/metrics=replica-0:H100:2:meta-llama/Llama-3.1-8B")
    assert (target.url, target.replica, target.gpu_type, target.gpu_count, target.model) == (
        "http://127.0.0.1:8000/metrics", "replica-0", "H100", 2, "meta-llama/Llama-3.1-8B")
    for bad, why in [("127.0.0.1:8000/metrics=r:H100:1", "expected URL="), ("http://h/metrics=r:H100", "expected URL="),
                     ("http://h/metrics=r:H100:two", "'two' is not an integer")]:
        with pytest.raises(click.BadParameter, match=why):
            parse_scrape(bad)
