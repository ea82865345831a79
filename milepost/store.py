"""The SQL store: engine set-up, migrations on open, and transactions.

SQLite (the default) runs in WAL mode with a busy timeout and foreign keys
on, and every write transaction starts with ``BEGIN IMMEDIATE``: a write
transaction takes the write lock before it reads, so two processes never
both read revision N and then race to write it (SQLite would answer the loser
with an immediate "database is locked" instead of waiting). On PostgreSQL the
revision compare-and-swap in the service layer does that job.
"""

from __future__ import annotations

import contextlib
import fcntl
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from milepost.errors import DatabaseUnreachableError, EnvironmentProblem

__all__ = ["SCHEMA_HEAD", "Store", "mask_url"]

# The newest migration; opening a store whose schema is older upgrades it.
SCHEMA_HEAD = "0003"
BUSY_TIMEOUT_MS = 30_000


def mask_url(url: str | URL) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


class Store:
    """One database plus the workspace it serves: ``home`` (the ``.milepost``
    folder: logs, artifacts) and ``root`` (default cwd of gates)."""

    def __init__(self, url: str, home: Path, root: Path) -> None:
        self.url = url
        self.home = home
        self.root = root
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise EnvironmentProblem(
                f"invalid database URL {url!r}: expected a SQLAlchemy URL such as"
                " sqlite:///path/milepost.db or postgresql+psycopg://user@host/db"
            ) from None
        self.dialect = parsed.get_backend_name()
        kwargs: dict[str, Any] = {}
        if self.dialect == "sqlite":
            kwargs["connect_args"] = {"timeout": BUSY_TIMEOUT_MS / 1000}
        elif self.dialect == "postgresql":
            kwargs["connect_args"] = {"connect_timeout": 5}
            kwargs["pool_pre_ping"] = True
        try:
            self.engine: Engine = create_engine(parsed, **kwargs)
        except (NoSuchModuleError, ModuleNotFoundError) as e:
            raise EnvironmentProblem(
                f"cannot open {mask_url(url)}: driver not installed ({e}); for PostgreSQL install milepost[postgres]"
            ) from None
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(self.engine.execution_options(milepost_write=True), expire_on_commit=False)

    @classmethod
    def open(cls, url: str, home: Path, root: Path) -> Store:
        """Connect, and bring the schema up to date (Alembic, only when needed)."""
        store = cls(url, home, root)
        store.migrate()
        return store

    def close(self) -> None:
        self.engine.dispose()

    # -- transactions ------------------------------------------------------

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        with self._guard(), self._sessions() as s, s.begin():
            yield s

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: commits on success, rolls back on any error."""
        with self._guard(), self._writer() as s, s.begin():
            yield s

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except DBAPIError as e:
            if e.connection_invalidated or _is_connect_error(e):
                raise self._unreachable(e) from None
            raise

    def _unreachable(self, e: BaseException) -> DatabaseUnreachableError:
        detail = str(getattr(e, "orig", e) or e).strip().splitlines()[0:1]
        msg = detail[0] if detail else type(e).__name__
        password = make_url(self.url).password
        if password:
            msg = msg.replace(str(password), "***")
        return DatabaseUnreachableError(
            f"cannot reach database {mask_url(self.url)}: {msg}; check MILEPOST_DB / --db and that the server is up",
            url=mask_url(self.url),
        )

    # -- schema ------------------------------------------------------------

    def schema_version(self) -> str | None:
        try:
            with self.engine.connect() as conn:
                try:
                    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
                except SQLAlchemyError:
                    return None
        except DBAPIError as e:
            raise self._unreachable(e) from None
        except OSError as e:
            raise self._unreachable(e) from None

    def migrate(self) -> None:
        version = self.schema_version()
        if version == SCHEMA_HEAD:
            return
        with self._migration_lock() as conn:
            if self.dialect == "sqlite":
                # A migration that re-creates a table (SQLite's batch mode) drops
                # the old one: with foreign keys on, ON DELETE CASCADE would
                # delete every dependent row. The pragma only works outside a
                # transaction, so it goes to the driver before anything else.
                conn.connection.driver_connection.execute("PRAGMA foreign_keys = OFF")
            try:
                self._upgrade(conn)
            finally:
                if self.dialect == "sqlite":
                    conn.rollback()  # nothing is open after a commit; this only ends a failed one
                    conn.connection.driver_connection.execute("PRAGMA foreign_keys = ON")

    def _upgrade(self, conn: Any) -> None:
        """Run the pending migrations on ``conn`` (the migration lock is held)."""
        # Another process may have migrated while we waited for the lock.
        try:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except SQLAlchemyError:
            conn.rollback()
            version = None
        if version == SCHEMA_HEAD:
            return
        if version is not None and not _known_revision(version):
            raise EnvironmentProblem(
                f"database {mask_url(self.url)} has schema {version!r}, newer than this milepost"
                f" (head {SCHEMA_HEAD}); upgrade milepost"
            )
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        conn.commit()
        if self.dialect == "sqlite":
            problems = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            conn.commit()
            if problems:
                raise EnvironmentProblem(
                    f"migration left {len(problems)} rows with broken references in {mask_url(self.url)}"
                )

    @contextlib.contextmanager
    def _migration_lock(self) -> Iterator[Any]:
        with self.engine.connect() as conn:
            if self.dialect == "postgresql":
                key = zlib.crc32(b"milepost-migrate")
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
                conn.commit()
                try:
                    yield conn
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
            elif self.dialect == "sqlite" and self.engine.url.database not in (None, "", ":memory:"):
                lock_path = Path(str(self.engine.url.database) + ".migrate-lock")
                with open(lock_path, "a") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    try:
                        yield conn
                    finally:
                        fcntl.flock(lock, fcntl.LOCK_UN)
            else:
                yield conn


def _known_revision(version: str) -> bool:
    versions = Path(__file__).parent / "migrations" / "versions"
    return any(p.name.startswith(version + "_") for p in versions.glob("*.py"))


def _is_connect_error(e: DBAPIError) -> bool:
    text_ = str(e.orig).lower()
    return any(
        s in text_
        for s in (
            "connection refused",
            "could not connect",
            "unable to open database",
            "timeout expired",
            "connection to server",
        )
    )


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own
        # implicit BEGIN is DEFERRED and cannot be made IMMEDIATE).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get("milepost_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
