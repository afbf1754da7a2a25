"""Service settings, read from the environment (prefix ``INFERCOST_``) and an optional ``.env``.

Every field documents its default. ``infercost/`` is the only package that reads settings; the
modules below it (serving, collectors, schema, alerts, app) take plain arguments, so they can be
used and tested without the environment.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

import click
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATA_DIR = Path(".infercost")
# values never echoed in an error message (register_secrets lists the same fields)
SECRET_FIELDS = ("ingest_token", "review_smtp_password", "review_webhook_url")
# Example values of a password or token, refused as a store password, ingest token or dashboard token:
# a deployment that kept one from a README or a compose file is open to anyone who read the same
# example.
PLACEHOLDER_SECRETS = frozenset({"change-me", "changeme", "change_me", "changeit", "password", "secret", "token"})


def _no_placeholder(value: str, what: str) -> str:
    if value.strip().lower() in PLACEHOLDER_SECRETS:
        raise ValueError(f"{what} is a placeholder: set one of your own (e.g. the output of `openssl rand -hex 24`)")
    return value


class Settings(BaseSettings):
    """All of infercost's settings; see the README's configuration reference."""

    model_config = SettingsConfigDict(env_prefix="INFERCOST_", env_file=".env", extra="ignore")

    data_dir: Path = Field(
        DEFAULT_DATA_DIR,
        description="Local state: the embedded store, the receiver's spool. Default .infercost/.",
    )
    clickhouse_url: str = Field(
        "",
        description=(
            "Store URL. Default chdb://<data_dir>/clickhouse (embedded chDB). Also chdb://memory, "
            "http(s)://user:pass@host:8123/db for a ClickHouse server."
        ),
    )
    database: str = Field("infercost", description="ClickHouse database holding every table.")
    retention_days: int = Field(30, ge=1, description="TTL of raw spans and metric points, days.")

    receiver_host: str = Field("127.0.0.1", description="OTLP/HTTP receiver bind address.")
    receiver_port: int = Field(4318, ge=1, le=65535, description="OTLP/HTTP receiver port (OTLP default 4318).")
    ingest_token: str = Field("", description="If set, the receiver requires 'Authorization: Bearer <token>' "
                                             "(required on a non-loopback receiver address).")
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="Max request body after decompression (OTLP spec: 64 MiB).")
    max_attribute_bytes: int = Field(64 * 1024, ge=256, description="Longer string/bytes attribute values are truncated (reported in partial_success).")
    keep_content: bool = Field(False, description="Keep prompts and completions that instrumentations put on spans "
                                                  "(OpenInference input.value, gen_ai.input.messages, ...); removed "
                                                  "before storing by default, counted in the receiver's metrics.")
    batch_max_rows: int = Field(5000, ge=1, description="Writer flushes at this many rows ...")
    batch_max_seconds: float = Field(1.0, gt=0, description="... or after this many seconds, whichever first.")
    batch_cap_rows: int = Field(100_000, ge=1, description="Largest single insert of the receiver's writer, rows "
                                                           "(spans): under load its batches grow to it; the "
                                                           "embedded store's memory peak grows with it.")
    batch_cap_bytes: int = Field(16 * 1024 * 1024, ge=1, description="Largest single insert of the receiver's "
                                 "writer, bytes of OTLP protobuf payload (~26k vLLM spans): the embedded store's "
                                 "memory for one insert grows with the bytes it parses; a larger cap costs less "
                                 "CPU per span and more memory (README: ingest figures).")
    inserts_in_flight: int = Field(1, ge=1, le=4, description="Inserts the receiver's writer runs side by side "
                                   "under sustained load (ClickHouse parses one insert on one core): 2 uses a second "
                                   "core when one is idle, at the memory of a second insert of batch_cap_bytes "
                                   "(+66 MB peak measured at 16 MiB emptying a full spool); same CPU per span.")
    queue_max_rows: int = Field(500_000, ge=1, description="Rows waiting for the store before the receiver answers 429.")
    spool_max_bytes: int = Field(1024 * 1024 * 1024, ge=0, description="On-disk spool cap (store down); beyond it: 503.")
    min_free_disk_bytes: int = Field(256 * 1024 * 1024, ge=0, description="Embedded store: below this much free disk the cost jobs pause (a refresh on a full disk can break a table definition).")
    max_future_skew_s: float = Field(3600.0, gt=0, description="Spans / metric points dated further ahead are rejected (partial_success).")

    fleet_file: Path = Field(Path("fleet.yaml"), description="GPU prices, replica inventory, weights, SLOs.")
    dashboard_host: str = Field("127.0.0.1", description="Dashboard bind address.")
    dashboard_port: int = Field(8501, ge=1, le=65535, description="Dashboard port (Streamlit default).")
    api_host: str = Field("127.0.0.1", description="Read-only query API (/api/v1) and cost /metrics bind address.")
    api_port: int = Field(8502, ge=0, le=65535, description="Query API port (0 = any free port; the CLI finds it "
                                                             "through <data dir>/service.json).")
    auth_token: str = Field("", description="Require this token for the dashboard (login form, or "
                                            "'Authorization: Bearer') and the query API. '' = none.")
    auth_basic: str = Field("", description="Require HTTP basic auth 'user:password' for the dashboard instead.")
    allow_unauthenticated: bool = Field(False, description="Serve the dashboard / API, or receive spans, on a "
                                                           "non-loopback address without authentication (refused "
                                                           "otherwise).")

    # Weekly cost review (app.review): `infercost review` and the optional schedule in `infercost up`.
    review_schedule: bool = Field(False, description="Write (and deliver) the weekly review inside `infercost up`.")
    review_weekday: int = Field(0, ge=0, le=6, description="Day of the weekly run, 0 = Monday (UTC).")
    review_hour: int = Field(6, ge=0, le=23, description="Hour of the weekly run, UTC (default 06:00).")
    review_out_dir: Path | None = Field(None, description="Where reviews are written. Default <data_dir>/reviews.")
    review_webhook_url: str = Field("", description="POST each review here (JSON, 'text' = Markdown). '' = off.")
    review_smtp_host: str = Field("", description="Mail each review via this SMTP host. '' = off.")
    review_smtp_port: int = Field(587, ge=1, le=65535, description="SMTP port (587 STARTTLS, 465 implicit TLS).")
    review_smtp_from: str = Field("infercost@localhost", description="Sender address of review mails.")
    review_smtp_to: str = Field("", description="Recipients of review mails, comma-separated.")
    review_smtp_user: str = Field("", description="SMTP login ('' = no authentication).")
    review_smtp_password: str = Field("", description="SMTP password.")
    review_smtp_starttls: bool = Field(True, description="Upgrade the SMTP connection with STARTTLS.")
    review_smtp_ssl: bool = Field(False, description="Implicit TLS (port 465) instead of STARTTLS.")

    @field_validator("database")
    @classmethod
    def _identifier(cls, value: str) -> str:
        from schema.store import validate_identifier

        return validate_identifier(value)

    @field_validator("clickhouse_url")
    @classmethod
    def _store_url(cls, value: str) -> str:
        from schema.store import StoreURL

        if value.strip() == "chdb://":
            # an empty path would open a throwaway in-memory store, and read commands would print
            # the figures of an empty one as if they were the fleet's
            raise ValueError("chdb:// needs a directory (chdb://<directory>) or chdb://memory")
        if value:
            StoreURL.parse(value)  # ValueError naming the accepted forms
            _no_placeholder(unquote(urlparse(value).password or ""), "the password")
        return value

    @field_validator("ingest_token", "auth_token")
    @classmethod
    def _own_token(cls, value: str) -> str:
        return _no_placeholder(value, "the token")

    @property
    def store_url(self) -> str:
        """The effective store URL: ``clickhouse_url`` or the embedded default under ``data_dir``."""
        if self.clickhouse_url:
            return self.clickhouse_url
        return f"chdb://{(self.data_dir / 'clickhouse').resolve()}"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"

    @property
    def service_file(self) -> Path:
        """Written by the process that owns the store (``up``, ``demo``): its pid and query API URL."""
        return self.data_dir / "service.json"


    def register_secrets(self) -> None:
        """Tell :mod:`schema.redact` the secret values among these settings, so no output shows them."""
        from schema.redact import register_secret

        for field in SECRET_FIELDS:
            register_secret(getattr(self, field))


class SettingsError(click.ClickException):
    """Invalid settings: one line per bad value, naming its environment variable (or flag); the CLI
    prints it as ``Error: ...`` and exits 1 (click), never a traceback."""


def load_settings(**overrides) -> Settings:
    """Settings from the environment, with explicit overrides (CLI flags) on top; their secret values
    are registered for redaction.

    Raises:
        SettingsError: a value is invalid (e.g. ``INFERCOST_RETENTION_DAYS=abc``, an unsupported
            ``INFERCOST_CLICKHOUSE_URL``); its message names the variable, the value and what is wrong.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        raise SettingsError("; ".join(_problem(err, given) for err in exc.errors())) from None
    settings.register_secrets()
    return settings


def _problem(err: dict, given: dict) -> str:
    from schema.redact import redact

    field = str(err["loc"][0]) if err.get("loc") else ""
    flag = field in given
    source = f"--{field.replace('_', '-')}" if flag else f"INFERCOST_{field.upper()}"
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    value = err.get("input")
    if field in SECRET_FIELDS or not isinstance(value, (str, int, float)):
        return f"{source}: {message}"
    shown = repr(redact(value)) if isinstance(value, str) else value  # a store URL may carry a password
    return f"{source} {shown}: {message}" if flag else f"{source}={shown}: {message}"
