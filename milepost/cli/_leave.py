"""Leaving the process without tearing the interpreter down.

A drive imports Prefect: about 1,500 modules. When the command is over,
CPython's finalization frees them one by one, and that took 0.5 s on the
2-core reference machine (`python -c "import prefect"` ends 0.5 s sooner
with ``os._exit``), after every gate had run and been recorded: time a user
waits on nothing (docs/benchmarks.md, "Leaving at once").

So the process's entry points (the ``milepost`` script, ``python -m
milepost``) end with ``os._exit(code)`` once Python has done what an exit
owes: the non-daemon threads are joined and the ``atexit`` handlers have run
(Prefect's drains of events and logs, the gate supervisor's close, a
temporary server's stop), since :class:`QuickExit` is registered first and
``atexit`` runs its handlers last-registered first. Then it shuts logging
down and flushes stdout and stderr itself. Nothing is left that the
finalization would have written: the store commits every transaction, and
files are written with ``with``.

Not done when :func:`main` is called as a function (tests, library users),
when the command ended by an exception that is not an exit, or under
``coverage``, whose data is written by a handler registered before ours.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys


class QuickExit:
    """The exit code of a finished command, and the handler that leaves with it."""

    def __init__(self) -> None:
        self.code: int | None = None  # None: no exit code to leave with (leave as Python does)
        atexit.register(self.leave)

    def ended(self, e: SystemExit | None) -> None:
        """The command ended: normally (None) or by ``e``."""
        code = None if e is None else e.code
        if code is None:
            self.code = 0
        elif isinstance(code, int) and not isinstance(code, bool):
            self.code = code

    def leave(self) -> None:
        if self.code is None or "coverage" in sys.modules:
            return
        logging = sys.modules.get("logging")
        if logging is not None:
            logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe (`| head`) has nothing to flush into
                stream.flush()
        os._exit(self.code)
