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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
RowMaker = Callable[[Sequence[Any], Sequence[Any]], tuple[Any, ...]]


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
        # args_many's row functions, by the fields of a row and the names of the shared values.
        self._makers: dict[tuple[tuple[str, ...], tuple[str, ...]], RowMaker] = {}

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

    def args_many(self, fields: Sequence[str], rows: Iterable[Sequence[Any]], same: Mapping[str, Any]) -> Iterator[Any]:
        """:meth:`args` of many rows, each a sequence of the values of
        ``fields`` in that order; the values in ``same`` (one for every row)
        go through their processor once. Each row goes through one function
        made for this statement, these fields and these shared names
        (:func:`_row_maker`, kept)."""
        names = self.order if self.order is not None else list(self.binds)
        passthrough = self.order is not None and not same and not self.fixed and tuple(fields) == tuple(names)
        if passthrough and all(self.binds[n] is None for n in names):  # rows as they are (a deps edge: integers)
            return iter(rows)
        key = (tuple(fields), tuple(sorted(same)))
        make = self._makers.get(key)
        shared_names = [n for n in names if n in same or n in self.fixed]
        if make is None:
            at = {f: i for i, f in enumerate(fields)}
            slot = {n: j for j, n in enumerate(shared_names)}
            plan = [(slot[n], None) if n in slot else (at[n], self.binds[n]) for n in names]
            make = self._makers[key] = _row_maker(plan, [n in slot for n in names])
        shared = []
        for n in shared_names:
            v, p = same[n] if n in same else self.fixed[n], self.binds[n]
            shared.append(p(v) if p is not None and v is not None else v)
        # Made as the driver binds them, one at a time: a list of 100,000 rows
        # first was 50 MB more for the process and its caches.
        out = (make(r, shared) for r in rows)
        if self.order is not None:
            return out
        return (dict(zip(names, values, strict=True)) for values in out)

    def tuples(self, description: Sequence[Sequence[Any]], found: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        procs = self.processors(description)
        if not any(procs):
            return [tuple(r) for r in found]
        return [tuple([v if p is None or v is None else p(v) for p, v in zip(procs, r, strict=True)]) for r in found]

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

    def _fetch(self, conn: Connection, params: Mapping[str, Any]) -> tuple[_Compiled, Any, list[Any]]:
        """Run the statement; its compiled form, the cursor's description and every row."""
        c = self._compiled(conn)
        cur = _cursor(conn)
        try:
            cur.execute(c.sql, c.args(params))
            return c, cur.description, cur.fetchall()
        except conn.dialect.loaded_dbapi.Error as e:
            raise _wrapped(conn, cur, c.sql, e) from e
        finally:
            cur.close()

    def rows(self, conn: Connection, **params: Any) -> list[Record]:
        c, description, found = self._fetch(conn, params)
        return c.records(description, found)

    def tuples(self, conn: Connection, **params: Any) -> list[tuple[Any, ...]]:
        """The result rows as tuples of the selected columns' values (for
        many rows: no :class:`Record` made per row)."""
        c, description, found = self._fetch(conn, params)
        return c.tuples(description, found)

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
        self,
        conn: Connection,
        fields: Sequence[str],
        rows: Iterable[Sequence[Any]],
        same: Mapping[str, Any] | None = None,
    ) -> None:
        """Run a statement once per row, each a sequence of the values of
        ``fields`` in that order; ``same``: values every row shares."""
        c = self._compiled(conn)
        cur = _cursor(conn)
        try:
            cur.executemany(c.sql, c.args_many(fields, rows, same or {}))
        except conn.dialect.loaded_dbapi.Error as e:
            raise _wrapped(conn, cur, c.sql, e) from e
        finally:
            cur.close()


def _row_maker(plan: Sequence[tuple[int, Processor]], is_shared: Sequence[bool]) -> RowMaker:
    """A function of a row and the shared values making the statement's
    values: for each, ``plan`` holds the index of the row's value (or, where
    ``is_shared``, of the shared one) and the processor a row's value goes
    through. (A function generated per statement, written out as one
    expression, measured no faster for 100,000 milestones: docs/benchmarks.md,
    "Fast paths".)"""
    steps = [(i, None if shared else p, shared) for (i, p), shared in zip(plan, is_shared, strict=True)]

    def make(r: Sequence[Any], s: Sequence[Any]) -> tuple[Any, ...]:
        out = []
        for i, p, shared in steps:
            v = s[i] if shared else r[i]
            out.append(v if p is None or v is None else p(v))
        return tuple(out)

    return make


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
