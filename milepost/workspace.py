"""Finding the workspace: the nearest ``.milepost/`` folder, like ``.git``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from milepost.errors import EnvironmentProblem, StoreNotFoundError

__all__ = ["HOME_DIR", "Workspace", "find_home", "init_workspace", "resolve_workspace"]

HOME_DIR = ".milepost"
DB_FILE = "milepost.db"


@dataclass(frozen=True)
class Workspace:
    url: str
    home: Path  # the .milepost folder: logs, artifacts, the default database
    root: Path  # the folder that holds it: default cwd of gates


def find_home(start: Path) -> Path | None:
    """The nearest ``.milepost`` folder at or above ``start``."""
    here = start.resolve()
    for folder in (here, *here.parents):
        candidate = folder / HOME_DIR
        if candidate.is_dir():
            return candidate
    return None


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def init_workspace(root: Path) -> Workspace:
    """Create the ``.milepost`` folder in ``root`` (the store itself is made by
    ``Store.open(..., create=True)``)."""
    home = root.resolve() / HOME_DIR
    if home.exists() and not home.is_dir():
        raise EnvironmentProblem(f"cannot create {home}: a file of that name is in the way; move it and run init again")
    try:
        home.mkdir(parents=True, exist_ok=True)
        ignore = home / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# milepost's store, logs and Prefect home: local to this machine\n*\n")
    except OSError as e:
        raise EnvironmentProblem(f"cannot create {home}: {e.strerror or e}") from None
    return Workspace(url=sqlite_url(home / DB_FILE), home=home, root=home.parent)


def resolve_workspace(db: str | None, cwd: Path | None = None) -> Workspace:
    """Where the store is: ``db`` (``--db`` / ``MILEPOST_DB``) if given, else
    the SQLite file of the nearest ``.milepost/``. Logs always go to the
    nearest ``.milepost/`` (or ``./.milepost`` when there is none)."""
    cwd = (cwd or Path(os.getcwd())).resolve()
    home = find_home(cwd)
    if db:
        if home is None:
            home = cwd / HOME_DIR
        return Workspace(url=db, home=home, root=home.parent)
    if home is None:
        raise StoreNotFoundError(
            f"no milepost store found in {cwd} or any parent folder;"
            " run `milepost init` in the workspace root, or set MILEPOST_DB to a database URL",
            cwd=str(cwd),
        )
    return Workspace(url=sqlite_url(home / DB_FILE), home=home, root=home.parent)
