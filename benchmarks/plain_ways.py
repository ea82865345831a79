"""The plain library ways milepost's fast paths are measured against (issue 31).

Each ``use_*`` function swaps one fast path for the plain way of the library
it stands in for, in this process:

* ``prepared``: the service's prebuilt statements (``milepost.service._prepared``)
  run through ``Connection.execute`` (SQLAlchemy Core with its compiled
  cache), rows as ``RowMapping``, many rows as one ``execute`` of a list of
  dicts;
* ``yaml``: a plan read by PyYAML's C loader (``yaml.load(text,
  Loader=CSafeLoader)``) where the plain block reader reads it.

``python benchmarks/plain_ways.py WAYS -- ARGS`` runs ``milepost ARGS`` with
the plain ways named in WAYS (comma-separated, or ``none``), so a benchmark
can time whole commands side by side.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

WAYS = ("prepared", "yaml")


def _swap(owner: Any, **new: Any) -> Callable[[], None]:
    old = {k: getattr(owner, k) for k in new}
    for k, v in new.items():
        setattr(owner, k, v)
    return lambda: [setattr(owner, k, v) for k, v in old.items()] and None


def use_prepared() -> Callable[[], None]:
    from sqlalchemy import Connection

    from milepost.service import _prepared

    def rows(self: Any, conn: Connection, **params: Any) -> list[Any]:
        return [_prepared.Record(r) for r in conn.execute(self.stmt, params).mappings()]

    def tuples(self: Any, conn: Connection, **params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(self.stmt, params)]

    def run(self: Any, conn: Connection, **params: Any) -> int:
        return int(conn.execute(self.stmt, params).rowcount)

    def run_many(
        self: Any,
        conn: Connection,
        fields: Sequence[str],
        found: Iterable[Sequence[Any]],
        same: Mapping[str, Any] | None = None,
    ) -> None:
        shared = dict(same or {})
        batch: list[dict[str, Any]] = []
        for r in found:
            batch.append({**dict(zip(fields, r, strict=True)), **shared})
            if len(batch) == 10_000:
                conn.execute(self.stmt, batch)
                batch = []
        if batch:
            conn.execute(self.stmt, batch)

    return _swap(_prepared.Prepared, rows=rows, tuples=tuples, run=run, run_many=run_many)


def use_yaml() -> Callable[[], None]:
    import yaml

    import milepost.planfile

    def read(text: str) -> Any:
        return yaml.load(text, Loader=yaml.CSafeLoader)

    return _swap(milepost.planfile, read_plain=read)


def use(ways: Iterable[str]) -> Callable[[], None]:
    """Swap in the plain ways named; a function that swaps them back."""
    undo = [{"prepared": use_prepared, "yaml": use_yaml}[way]() for way in ways]
    return lambda: [u() for u in reversed(undo)] and None


def main() -> None:
    ways = [w for w in sys.argv[1].split(",") if w and w != "none"]
    assert sys.argv[2] == "--"
    use(ways)
    from milepost.cli import run as cli

    sys.argv = ["milepost", *sys.argv[3:]]
    cli()


if __name__ == "__main__":
    main()
