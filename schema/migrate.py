"""Numbered ``.sql`` migrations, applied in order and recorded in ``schema_migrations``.

Files are ``schema/migrations/NNNN_<verb>_<object>.sql``. ``1000``-``1008`` are the schema baseline:
every table and view as it stands, one file per table family (spans, calls, cost configuration, cost
tables, cost jobs, the periodic chain, ops rollups, alerts, planner). Never edit one that has shipped:
a later change is the next number. Statements are separated by ``;`` at the end of a line. The only
template value is ``{{retention_days}}`` (an integer, validated), since TTLs cannot be bound
parameters. Applying twice changes nothing: applied versions are skipped and the DDL itself uses
``IF NOT EXISTS``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from schema.sqltext import split_statements
from schema.store import Store, StoreError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

# The first version of the schema baseline: the tables and views as they stand, one file per table family.
# The history before it was squashed into it (no store needed upgrading yet); later changes are
# migrations numbered after the baseline.
BASELINE_VERSION = 1000

_VERSION_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = MergeTree() ORDER BY version
"""


class MigrationError(Exception):
    """A migration statement failed; the message names the file, the statement number and its start."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def statements(self, retention_days: int) -> list[str]:
        """The file's statements, with ``{{retention_days}}`` filled in."""
        return split_statements(self.path.read_text().replace("{{retention_days}}", str(int(retention_days))))

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """All migrations in ``directory`` sorted by version; raises MigrationError on a bad name or a duplicate number."""
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"{path.name}: migration files are named NNNN_<verb>_<object>.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"{path.name}: version {version} is also used by {found[version].name}")
        found[version] = Migration(version, path.name, path)
    return [found[v] for v in sorted(found)]


def applied_versions(store: Store) -> set[int]:
    store.command(_VERSION_TABLE_DDL, tag="migrate.version_table")
    rows = store.query("SELECT version FROM schema_migrations", tag="migrate.applied").result_rows
    return {int(r[0]) for r in rows}


def migrate(store: Store, retention_days: int = 30, directory: Path = MIGRATIONS_DIR, progress=None,
            until: int | None = None, write_out: bool = True) -> list[str]:
    """Apply every pending migration in order.

    Args:
        store: the store, bound to our database.
        retention_days: TTL of raw spans and metric points, in days (> 0).
        directory: where the ``.sql`` files are.
        progress: optional callable(str) told about each applied file.
        until: apply only versions up to this number (benchmarks compare a schema before and after
            a migration); None = all.
        write_out: after the last migration, give the periodic cost chain's views the queries of
            ``schema/jobs/written/`` (:func:`schema.jobs.periodic.write_out`: views whose marks already
            name the files' text are left alone). Only the generator of those
            files (:mod:`schema.jobs.writeout`) passes False.

    Returns:
        Names of the migrations applied now (empty when up to date).

    Raises:
        MigrationError: naming the file, the statement number and its first line.
    """
    if int(retention_days) <= 0:
        raise MigrationError(f"retention_days must be > 0, got {retention_days}")
    done = applied_versions(store)
    migrations = discover(directory)
    if done and migrations and min(done) < BASELINE_VERSION <= migrations[0].version:
        raise MigrationError(
            f"this store was made by an infercost older than its schema baseline (migration {min(done):04d} is "
            f"recorded in {store.database}.schema_migrations): its schema cannot be upgraded. Start a new store "
            f"(`infercost demo --reset`, or another INFERCOST_CLICKHOUSE_URL or INFERCOST_DATABASE) and re-send or backfill the data")
    applied = []
    for migration in migrations:
        if migration.version in done or (until is not None and migration.version > until):
            continue
        for index, statement in enumerate(migration.statements(retention_days), start=1):
            try:
                store.command(statement, tag=f"migrate.{migration.version:04d}")
            except StoreError as exc:
                first = statement.splitlines()[0][:120]
                raise MigrationError(
                    f"{migration.name}, statement {index} ({first!r}): {exc}"
                ) from exc
        store.insert("schema_migrations", [[migration.version, migration.name, migration.checksum]],
                     ["version", "name", "checksum"], tag="migrate.record")
        applied.append(migration.name)
        if progress:
            progress(migration.name)
    if until is None and write_out:
        # after the last migration only: the chain's views get the written-out queries
        from schema.jobs import periodic

        periodic.write_out(store)
    return applied


_TTL_DAYS = re.compile(r"toIntervalDay\((\d+)\)|INTERVAL\s+(\d+)\s+DAY", re.IGNORECASE)


def table_retention_days(store: Store, table: str = "otel_traces") -> int | None:
    """The retention (days) in ``table``'s TTL as the store has it, or None (no table, no TTL).

    The migrations write ``{{retention_days}}`` into the TTL when they create a table; a later change
    of the setting takes effect only with :func:`apply_retention` (``infercost migrate``), so the
    receiver asks the store rather than the settings which data would be dropped at insert. Raises
    StoreError.
    """
    match = _TTL_DAYS.search(_ttl_clause(store, table))
    return int(match.group(1) or match.group(2)) if match else None


def _ttl_clause(store: Store, table: str) -> str:
    """``table``'s TTL expression as the store has it ('' for no table or no TTL). Raises StoreError."""
    sql = (Path(__file__).parent / "table_ttl.sql").read_text()
    text = store.scalar(sql, {"table": table}, tag="migrate.table_ttl") or ""
    if " TTL " not in text:
        return ""
    return re.split(r"\s+SETTINGS\s+", text.split(" TTL ", 1)[1], maxsplit=1)[0].strip()


_CREATE_NAME = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?", re.IGNORECASE)
_RETENTION_TTL = re.compile(r"^(?P<expr>.+?)\s*\+\s*toIntervalDay\((?P<days>\d+)\)\s*$", re.DOTALL)


def retention_tables(directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Tables whose TTL the migrations set from ``{{retention_days}}`` (raw spans, metric points, the
    cost tables and rollups), in migration order; the scratch tables' fixed TTLs and the periodic
    chain's ``*_live`` tables are not among them."""
    names: list[str] = []
    for migration in discover(directory):
        text = migration.path.read_text()
        for part in split_statements(text):
            match = _CREATE_NAME.search(part)
            # a *_live table is replaced wholesale by the periodic chain every minute (an ALTER of its TTL
            # would not outlast the next refresh) and holds only the trailing window anyway
            if (match and "{{retention_days}}" in part and match.group(1) not in names
                    and not match.group(1).endswith("_live")):
                names.append(match.group(1))
    return names


def apply_retention(store: Store, retention_days: int, directory: Path = MIGRATIONS_DIR,
                    progress=None) -> list[tuple[str, int, int]]:
    """Set the retention of every table of :func:`retention_tables` that keeps another number of days.

    The migrations write the retention into a table's TTL when they create it; a later change of the
    setting (``INFERCOST_RETENTION_DAYS``) takes effect here: ``ALTER TABLE … MODIFY TTL`` with the
    table's own TTL expression and the new number of days (ClickHouse then re-evaluates the TTL of
    the stored parts: shorter drops the rows now older, longer keeps what is still there).

    Returns (table, days before, days now) of the tables changed. Raises MigrationError for a bad
    number or a TTL this function cannot read, StoreError from the store.
    """
    if int(retention_days) <= 0:
        raise MigrationError(f"retention_days must be > 0, got {retention_days}")
    changed = []
    for table in retention_tables(directory):
        ttl = _ttl_clause(store, table)
        if not ttl:
            continue  # not in this store (dropped by a later migration) or no TTL
        match = _RETENTION_TTL.match(ttl)
        if not match:
            raise MigrationError(f"{table}: cannot read the retention in its TTL {ttl!r}")
        days = int(match.group("days"))
        if days == int(retention_days):
            continue
        store.command(f"ALTER TABLE `{table}` MODIFY TTL {match.group('expr')} + toIntervalDay({int(retention_days)})",
                      tag="migrate.retention")
        changed.append((table, days, int(retention_days)))
        if progress:
            progress(f"{table}: retention {days} -> {int(retention_days)} days")
    return changed
