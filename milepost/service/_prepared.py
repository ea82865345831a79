"""Statements compiled once per dialect and run on the driver's cursor.

A transition runs five statements. Through ``Connection.execute`` each costs
SQLAlchemy's statement machinery (cache key, compiled-cache lookup, execution
context, result set-up): about 60 µs on the reference machine, where SQLite
itself takes about 10 µs. The hot statements are therefore SQLAlchemy
statements compiled once by the connection's dialect (so placeholders,
quoting and ``FOR UPDATE`` are the dialect's) and run on the DB-API cursor of
the same SQLAlchemy connection, inside its transaction. Values go through
the columns' own bind and result processors (the public
``TypeEngine.dialect_impl(...).bind_processor`` / ``result_processor``), so a
value reads and writes exactly as through ``Connection.execute``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.selectable import Select

__all__ = ["Prepared", "Record"]


class Record(dict[str, Any]):
    """A result row: by key (``r["name"]``) or attribute (``r.name``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def _mapping(self) -> Mapping[str, Any]:
        return self


Processor = Callable[[Any], Any] | None


class _Compiled:
    def __init__(self, stmt: ClauseElement, dialect: Dialect) -> None:
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect))
        self.sql = compiled.string
        self.order: Sequence[str] | None = compiled.positiontup if compiled.positional else None
        self.binds: dict[str, Processor] = {
            name: bp.type.dialect_impl(dialect).bind_processor(dialect) for name, bp in compiled.binds.items()
        }
        # Values written into the statement (``status == "done"``, a LIMIT): the caller passes only the bindparams.
        self.fixed: dict[str, Any] = {
            name: bp.effective_value for name, bp in compiled.binds.items() if not bp.required and bp.callable is None
        }
        self.dialect = dialect
        self.columns = list(stmt.selected_columns) if isinstance(stmt, Select) else []
        self.keys = [str(col.key) for col in self.columns]
        # Built on the first result: a processor may depend on the type the driver reports.
        self.results: list[Processor] | None = None

    def processors(self, description: Sequence[Sequence[Any]]) -> list[Processor]:
        if self.results is None:
            d = self.dialect
            self.results = [
                col.type.dialect_impl(d).result_processor(d, desc[1])
                for col, desc in zip(self.columns, description, strict=True)
            ]
        return self.results

    def args(self, params: Mapping[str, Any]) -> Any:
        binds = self.binds
        if self.fixed:
            params = {**self.fixed, **params}
        if self.order is not None:
            out = []
            for n in self.order:
                v = params[n]
                p = binds[n]
                out.append(p(v) if p is not None and v is not None else v)
            return out
        return {n: (p(params[n]) if p is not None and params[n] is not None else params[n]) for n, p in binds.items()}

    def args_many(self, params: Sequence[Mapping[str, Any]], same: Mapping[str, Any]) -> list[Any]:
        """:meth:`args` of many rows, column by column; the values in ``same``
        (one for every row) go through their processor once."""
        names = list(self.order) if self.order is not None else list(self.binds)
        count = len(params)
        columns: list[Sequence[Any]] = []
        for n in names:
            p = self.binds[n]
            if n in same or n in self.fixed:
                v = same[n] if n in same else self.fixed[n]
                columns.append([p(v) if p is not None and v is not None else v] * count)
                continue
            vs = [row[n] for row in params]
            columns.append([None if v is None else p(v) for v in vs] if p is not None else vs)
        if self.order is not None:
            return list(zip(*columns, strict=True))
        return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]

    def records(self, description: Sequence[Sequence[Any]], found: Sequence[Sequence[Any]]) -> list[Record]:
        procs = self.processors(description)
        return [
            Record(
                (k, p(v) if p is not None and v is not None else v)
                for k, p, v in zip(self.keys, procs, row, strict=True)
            )
            for row in found
        ]


class Prepared:
    """One statement, compiled on first use per dialect."""

    def __init__(self, stmt: ClauseElement) -> None:
        self.stmt = stmt
        self._by_dialect: dict[str, _Compiled] = {}

    def _compiled(self, conn: Connection) -> _Compiled:
        name = conn.dialect.name
        c = self._by_dialect.get(name)
        if c is None:
            c = self._by_dialect[name] = _Compiled(self.stmt, conn.dialect)
        return c

    def rows(self, conn: Connection, **params: Any) -> list[Record]:
        c = self._compiled(conn)
        cur = _cursor(conn)
        try:
            cur.execute(c.sql, c.args(params))
            return c.records(cur.description, cur.fetchall())
        except conn.dialect.loaded_dbapi.Error as e:
            raise _wrapped(conn, cur, c.sql, e) from e
        finally:
            cur.close()

    def run(self, conn: Connection, **params: Any) -> int:
        """Run a statement that returns no rows; its row count."""
        c = self._compiled(conn)
        cur = _cursor(conn)
        try:
            cur.execute(c.sql, c.args(params))
            return int(cur.rowcount)
        except conn.dialect.loaded_dbapi.Error as e:
            raise _wrapped(conn, cur, c.sql, e) from e
        finally:
            cur.close()

    def run_many(
        self, conn: Connection, params: Sequence[Mapping[str, Any]], same: Mapping[str, Any] | None = None
    ) -> None:
        """Run a statement once per row of ``params``; ``same``: values every row shares."""
        c = self._compiled(conn)
        cur = _cursor(conn)
        try:
            cur.executemany(c.sql, c.args_many(params, same or {}))
        except conn.dialect.loaded_dbapi.Error as e:
            raise _wrapped(conn, cur, c.sql, e) from e
        finally:
            cur.close()


def _cursor(conn: Connection) -> Any:
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    return dbapi_conn.cursor()


def _wrapped(conn: Connection, cur: Any, sql: str, e: Any) -> StatementError:
    """A driver error as SQLAlchemy's ``DBAPIError`` (as ``Connection.execute``
    raises it), so the store turns it into an environment error the same way;
    a lost connection is invalidated."""
    lost = conn.dialect.is_disconnect(e, conn.connection.dbapi_connection, cur)
    if lost:
        conn.invalidate(e)
    base: type[Exception] = conn.dialect.loaded_dbapi.Error
    orig: Exception = e
    return DBAPIError.instance(sql, None, orig, base, connection_invalidated=lost, dialect=conn.dialect)
