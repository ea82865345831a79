"""The SQL store: engine set-up, existence and migrations on open (only
``create``, i.e. ``milepost init``, makes a store), its identity (the folder
of its evidence on disk), transactions, and database faults as exit 3.

SQLite runs in WAL mode with a busy timeout and foreign keys on; every write
transaction starts with ``BEGIN IMMEDIATE``, so two processes never both read
revision N and race to write it. On PostgreSQL a write's first statement
locks the item's row (``FOR UPDATE``, :mod:`milepost.service._tx`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, SQLAlchemyError

from milepost.errors import (
    DatabaseUnreachableError,
    EnvironmentProblem,
    MilepostError,
    StoreDamagedError,
    StoreNotFoundError,
)

__all__ = ["SCHEMA_HEAD", "Store", "mask_url"]

SCHEMA_HEAD = "0009"  # the newest migration: opening a store whose schema is older upgrades it
# The tables a sound store has (alembic_version aside).
TABLES = frozenset(
    {
        "work_items",
        "milestones",
        "milestone_deps",
        "gate_runs",
        "events",
        "focus",
        "work_refs",
        "store_meta",
        "input_manifests",
        "unit_passes",
    }
)
# Seconds a locked SQLite write waits (MILEPOST_BUSY_TIMEOUT), and seconds in
# all a lost connection is retried (MILEPOST_DB_RETRY): see milepost.retry.
LOCKED = "database is locked by another process"


def mask_url(url: str | URL) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


class Store:
    """One database plus the workspace it serves: ``home`` (the ``.milepost``
    folder: logs, artifacts) and ``root`` (default cwd of gates). ``id`` is the
    store's identity, written when it was created: the evidence on disk is
    filed under it, so two stores never mix their logs."""

    def __init__(
        self, url: str, home: Path, root: Path, *, busy_timeout: float | None = None, retry_for: float | None = None
    ) -> None:
        if busy_timeout is None or retry_for is None:
            from milepost.settings import load_settings

            settings = load_settings()
            busy_timeout = settings.busy_timeout if busy_timeout is None else busy_timeout
            retry_for = settings.db_retry if retry_for is None else retry_for
        self.busy_timeout = busy_timeout
        self.retry_for = retry_for
        self.url = url
        self.home = home
        self.root = root
        self.id = ""
        self.legacy_layout = False
        self.created = False  # this open made the store (``create``)
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise EnvironmentProblem(
                f"invalid database URL {url!r}: expected a SQLAlchemy URL such as"
                " sqlite:///path/milepost.db or postgresql+psycopg://user@host/db"
            ) from None
        self.dialect = parsed.get_backend_name()
        self._sqlite_file = _sqlite_file(parsed) if self.dialect == "sqlite" else None
        kwargs: dict[str, Any] = {}  # (JSON columns by json.dumps, SQLAlchemy's default)
        if self.dialect == "sqlite":
            kwargs["connect_args"] = {"timeout": busy_timeout}
        elif self.dialect == "postgresql":
            kwargs["connect_args"] = {"connect_timeout": 5}
            kwargs["pool_pre_ping"] = True
        try:
            self.engine: Engine = create_engine(parsed, **kwargs)
        except (NoSuchModuleError, ModuleNotFoundError) as e:
            raise EnvironmentProblem(
                f"cannot open {mask_url(url)}: driver not installed ({e}); for PostgreSQL install milepost[postgres]"
            ) from None
        except (ArgumentError, TypeError, ValueError) as e:
            raise EnvironmentProblem(f"invalid database URL {mask_url(url)}: {e}") from None
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine, int(busy_timeout * 1000))
        # The service speaks SQLAlchemy Core on connections: explicit
        # statements, no identity map, no ORM session overhead per statement.
        self._writer_engine = self.engine.execution_options(milepost_write=True)
        self._writer: Connection | None = None
        self._writer_pid = 0
        self._owner = threading.get_ident()

    def at(self, root: Path) -> Store:
        """This store with another default cwd of gates and root of inputs
        (the same database and home): a drive whose gates prove the work in
        another checkout of the workspace's repository (flows/doer_attempts.py)."""
        return cast(Store, _Rooted(self, root))

    @classmethod
    def open(cls, url: str, home: Path, root: Path, *, create: bool = False) -> Store:
        """Connect, bring the schema up to date (Alembic, only when needed) and
        read the store's identity. Only ``create`` (``milepost init``) makes a
        new store: a missing or empty database is refused (StoreNotFoundError)."""
        store = cls(url, home, root)
        try:
            with store._guard():
                store._check_exists(create)
                store.migrate(create=create)
                store._read_identity()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        if self._writer is not None and self._writer_pid == os.getpid():
            with contextlib.suppress(Exception):
                self._writer.close()
        self._writer = None
        self.engine.dispose()

    @property
    def where(self) -> str:
        """The database, as messages name it (a file path, or the masked URL)."""
        return str(self._sqlite_file) if self._sqlite_file else mask_url(self.url)

    # -- transactions ------------------------------------------------------

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        with self._guard(), self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction: commits on success, rolls back on any error.

        The thread that opened the store keeps one connection for its writes
        (no pool checkout per transaction); other threads (lease keepers, the
        MCP server's workers) take theirs from the pool."""
        if threading.get_ident() != self._owner:
            with self._guard(), self._writer_engine.begin() as conn:
                yield conn
            return
        with self._guard():
            conn = self._held_writer()
            with conn.begin():
                yield conn

    def _held_writer(self) -> Connection:
        conn = self._writer
        if conn is not None and (conn.closed or conn.invalidated or self._writer_pid != os.getpid()):
            if self._writer_pid == os.getpid():
                with contextlib.suppress(Exception):
                    conn.close()
            conn = None  # a connection of the parent process is never used by a forked child
        if conn is None:
            conn = self._writer = self._writer_engine.connect()
            self._writer_pid = os.getpid()
        return conn

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Database faults are environment problems (exit 3) with one line."""
        try:
            yield
        except (MilepostError, IntegrityError):
            raise  # refusals, and constraints: the caller's business
        except DBAPIError as e:
            if e.connection_invalidated or _is_connect_error(e):
                raise self._unreachable(e) from None
            raise self._fault(e) from None
        except sqlite3.Error as e:
            # Raised by the driver itself where SQLAlchemy does not wrap it: the
            # BEGIN IMMEDIATE of a write (see _sqlite_setup) waiting on a lock.
            raise self._fault(e) from None
        except OSError as e:
            raise EnvironmentProblem(f"cannot use database {self.where}: {e.strerror or e}") from None

    def _detail(self, e: BaseException) -> str:
        lines = str(getattr(e, "orig", e) or e).strip().splitlines()
        msg = lines[0] if lines else type(e).__name__
        password = make_url(self.url).password
        if password:
            msg = msg.replace(str(password), "***")
        return msg

    def _unreachable(self, e: BaseException) -> DatabaseUnreachableError:
        return DatabaseUnreachableError(
            f"cannot reach database {mask_url(self.url)}: {self._detail(e)};"
            " check MILEPOST_DB / --db and that the server is up",
            url=mask_url(self.url),
        )

    def _fault(self, e: BaseException) -> EnvironmentProblem:
        msg = self._detail(e)
        low = msg.lower()
        if "readonly" in low or "read-only" in low or "permission denied" in low:
            return EnvironmentProblem(
                f"cannot write database {self.where}: {msg}; check its permissions (and its folder's)",
                database=self.where,
            )
        if "not a database" in low or "malformed" in low or "no such table" in low or "does not exist" in low:
            return StoreDamagedError(
                f"database {self.where} is damaged: {msg}; restore it from a backup", database=self.where
            )
        if "locked" in low:
            return EnvironmentProblem(
                f"{LOCKED}: {self.where} stayed locked for {self.busy_timeout:g} s (MILEPOST_BUSY_TIMEOUT);"
                " nothing was changed, try again",
                database=self.where,
            )
        return EnvironmentProblem(f"database {self.where}: {msg}", database=self.where)

    # -- existence, schema, identity -------------------------------------------

    def _check_exists(self, create: bool) -> None:
        path = self._sqlite_file
        if path is None:
            return
        if path.is_dir():
            raise StoreDamagedError(f"database {path} is a folder, not a SQLite file", database=str(path))
        if path.exists():
            return
        if not create:
            raise StoreNotFoundError(
                f"no milepost database at {path}: run `milepost init` in the workspace root to create a store,"
                " or point --db / MILEPOST_DB at an existing one",
                database=str(path),
            )
        if not path.parent.is_dir():
            raise StoreNotFoundError(f"cannot create database {path}: folder {path.parent} does not exist")

    def _tables(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(inspect(conn).get_table_names())

    def schema_version(self) -> str | None:
        """The schema version recorded in the database (None: no milepost schema)."""
        with self._guard():
            if "alembic_version" not in self._tables():
                return None
            with self.engine.connect() as conn:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()

    def migrate(self, *, create: bool = False) -> None:
        tables = self._tables()
        version = None
        if "alembic_version" in tables:
            with self.engine.connect() as conn:
                version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        if version is None:
            ours = sorted(tables & TABLES)
            if ours:
                raise StoreDamagedError(
                    f"database {self.where} has milepost tables but no schema version (alembic_version);"
                    " it is damaged: restore it from a backup",
                    database=self.where,
                )
            self.created = True
            if not create:
                raise StoreNotFoundError(
                    f"database {self.where} holds no milepost store (it is empty): run `milepost init`"
                    " to create one there, or point --db / MILEPOST_DB at an existing store",
                    database=self.where,
                )
        if version == SCHEMA_HEAD:
            missing = sorted(TABLES - tables)
            if missing:
                raise StoreDamagedError(
                    f"database {self.where} is damaged: table(s) {', '.join(missing)} missing;"
                    " restore it from a backup",
                    database=self.where,
                )
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
                f"database {self.where} has schema {version!r}, newer than this milepost"
                f" (head {SCHEMA_HEAD}); upgrade milepost"
            )
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, "head")
            conn.commit()
        except SQLAlchemyError as e:
            conn.rollback()
            raise StoreDamagedError(
                f"cannot upgrade database {self.where} from schema {version or 'none'} to {SCHEMA_HEAD}:"
                f" {self._detail(e)}; its tables do not match its recorded schema version: restore it from a backup",
                database=self.where,
            ) from None
        if self.dialect == "sqlite":
            problems = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            conn.commit()
            if problems:
                raise StoreDamagedError(f"migration left broken references in {self.where} ({len(problems)} found)")

    def _read_identity(self) -> None:
        with self.engine.connect() as conn:
            meta: dict[str, str] = {str(k): str(v) for k, v in conn.execute(text("SELECT key, value FROM store_meta"))}
        if not meta.get("store_id"):
            raise StoreDamagedError(
                f"database {self.where} has no store identity (store_meta.store_id); restore it from a backup",
                database=self.where,
            )
        self.id = str(meta["store_id"])
        self.legacy_layout = meta.get("legacy_layout") == "1"

    # -- evidence on disk ---------------------------------------------------------

    def evidence_dir(self, kind: str) -> Path:
        """Where this store's files of ``kind`` (logs, work-items) live:
        ``.milepost/<kind>/<store id>/``."""
        return self.home / kind / self.id

    def relative(self, path: Path) -> str:
        """``path`` as stored: relative to the workspace root when inside it,
        so a moved or copied workspace keeps finding its files."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def resolve(self, stored: str) -> Path:
        """A stored path, found from this workspace (absolute ones as they are)."""
        return self.root / stored

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


def _sqlite_file(url: URL) -> Path | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db).absolute()


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


def _sqlite_setup(engine: Engine, busy_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own
        # implicit BEGIN is DEFERRED and cannot be made IMMEDIATE).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        # 64 MiB of pages in memory (default 2 MiB): a large plan writes five indexes
        # of the milestones, one in name order (docs/benchmarks.md: evicted pages re-read).
        cur.execute("PRAGMA cache_size = -65536")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get("milepost_write", False)
        # On the driver's connection: this runs once per transaction, and
        # SQLAlchemy's statement machinery would cost more than BEGIN itself.
        conn.connection.driver_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")


class _Rooted:
    """A store seen from another root (:meth:`Store.at`): everything else,
    its connections and locks among them, is the store's own."""

    def __init__(self, store: Store, root: Path) -> None:
        self._store = store
        self.root = root

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_store":  # (copy and pickle look these up before __init__ ran)
            raise AttributeError(name)
        return getattr(self._store, name)
