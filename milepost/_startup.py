"""Start-up of the command line: what it costs to begin is most of what a
state command costs, so imports run in :func:`quiet_imports`.

Two costs there are not milepost's work and are avoided while milepost's
own modules load:

- Python's cyclic garbage collector runs full collections while SQLAlchemy
  and pydantic build their many objects at import. Nothing imported is
  garbage, so the collector is paused during the imports and the imported
  objects are then frozen out of later collections (``gc.freeze``).
- When pydantic builds its first model it looks for plugins among the entry
  points of every installed distribution. milepost's models need no plugin:
  pydantic's documented switch ``PYDANTIC_DISABLE_PLUGINS`` is set during
  the block and put back after, so gates, Prefect and everything built later
  see the user's environment.

Prefect's import (by ``drive`` and ``tick``) runs with the collector paused
too (:func:`collector_paused`), but not with pydantic's switch: the first
gates start their commands while Prefect loads, and those inherit the
environment. What each cost is in docs/benchmarks.md. Standard library
only: it runs before anything else is imported.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused", "quiet_imports"]

_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while the block imports; what it built is then
    frozen out of later collections."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


@contextmanager
def quiet_imports() -> Iterator[None]:
    prior = os.environ.get(_PLUGINS)
    os.environ[_PLUGINS] = "__all__"
    try:
        with collector_paused():
            yield
    finally:
        if prior is None:
            os.environ.pop(_PLUGINS, None)
        else:
            os.environ[_PLUGINS] = prior
