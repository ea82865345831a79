"""A Ctrl-C (or SIGTERM) that arrives while a module is imported, kept.

A drive's first gates run while Prefect is imported (flows/early.py), so a
user's Ctrl-C often lands inside that import. Code there may swallow it:
Python 3.11 wraps an exception raised in a descriptor's ``__set_name__`` in a
``RuntimeError``, and Prefect's plugin loader logs any ``Exception`` and goes
on. The drive then ran its gate to the end and exited 0 (a CI run on a loaded
machine saw it). :func:`import_keeping_interrupts` notes each signal as it is
raised and raises ``KeyboardInterrupt`` again once the import has returned. The
collector is paused during the import (:func:`milepost._startup.collector_paused`)."""

from __future__ import annotations

import importlib
import signal
import threading
from types import FrameType, ModuleType

__all__ = ["import_keeping_interrupts"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def import_keeping_interrupts(name: str) -> ModuleType:
    """``importlib.import_module(name)``; a SIGINT or SIGTERM during it ends
    in ``KeyboardInterrupt`` even when the imported code caught it."""
    from milepost._startup import collector_paused

    if threading.current_thread() is not threading.main_thread():
        with collector_paused():
            return importlib.import_module(name)
    noted = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        noted.set()
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, handler) for s in _SIGNALS}
    try:
        with collector_paused():
            module = importlib.import_module(name)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if noted.is_set():
        raise KeyboardInterrupt
    return module
