"""Prefect is the engine and the window; the store is the truth.

A drive talks to the Prefect API besides running its gates: the flow run's
states, the plan nodes, the progress and summary artifacts, the wait for the
server to hold every task run. None of that may cost a proven result or hold
the drive for minutes when the API goes away (a killed ``prefect server``,
a network cut), so:

- every request of Prefect's client is bounded: ``MILEPOST_PREFECT_TIMEOUT``
  seconds per request and ``MILEPOST_PREFECT_RETRIES`` retries (Prefect's
  own default, 5 retries with backoff 2, 4 ... 32 s, held a drive about a
  minute per call, seven minutes in all): :func:`client_settings`, applied
  to the environment before Prefect is imported;
- artifacts are best effort, made by threads of their own the drive never
  waits on (:mod:`milepost.flows.artifacts`); plan nodes and the end's
  waiting are skipped once the API is known lost (:meth:`PrefectGuard.call`);
- a prober asks the API's ``/health`` every second; when it has not answered
  for ``MILEPOST_PREFECT_GRACE`` seconds (a restart within that is ridden
  out; a call that fails, a busy server's 503 say, is a warning), the API is lost: the
  drive starts no new gate (what it would run were invisible in the UI),
  lets the running gates finish and records them in the store, then exits 3 naming the API
  (:class:`~milepost.errors.PrefectUnreachableError`);
- before each claim the loop asks :meth:`PrefectGuard.may_start`: a
  milestone is claimed only when the API answered within the last
  :data:`FRESH_SECONDS` (asked then and there when it did not); while it
  does not answer, nothing is claimed until it answers again (a restart
  ridden out) or is lost. Once claimed, before its gate starts, the API is
  asked again unless it answered within :data:`CLAIMED_FRESH_SECONDS` (a
  round trip of a millisecond or two): a claim in flight when the server
  went away is given back unstarted (an interrupted attempt: no budget
  spent).

Nothing here imports Prefect at module level: :func:`client_settings` is
read before Prefect is.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from milepost.errors import PrefectUnreachableError
from milepost.settings import Settings

__all__ = [
    "CLAIMED_FRESH_SECONDS",
    "FRESH_SECONDS",
    "PrefectGuard",
    "Quieted",
    "client_settings",
    "is_api_error",
    "task_failure",
]

T = TypeVar("T")
PROBE_SECONDS = 1.0
# A claim needs an answer of the API at most this old (else it asks first): a server killed while
# a gate ran is seen before the next claim, not up to a probe later.
FRESH_SECONDS = 0.5
# Once claimed, before its gate starts, an answer at most this old (else asked again): a claim in flight
# when the server went away is given back, at the cost of a round trip per claim at most every 0.1 s.
CLAIMED_FRESH_SECONDS = 0.1


def client_settings(settings: Settings) -> dict[str, str]:
    """Prefect's client settings that bound each of its API calls."""
    return {
        "PREFECT_API_REQUEST_TIMEOUT": f"{settings.prefect_timeout:g}",
        "PREFECT_CLIENT_MAX_RETRIES": str(settings.prefect_retries),
    }


def is_api_error(e: BaseException) -> bool:
    """Whether ``e`` says the Prefect API could not be reached (or failed on
    its side), as opposed to a bug. (Prefect's client is httpx; its errors are
    told by name so that milepost does not import it.)"""
    kinds = {c.__name__ for c in type(e).__mro__ if c.__module__.startswith("httpx")}
    if "HTTPStatusError" in kinds:
        return int(getattr(getattr(e, "response", None), "status_code", 0)) >= 500
    if "TransportError" in kinds or isinstance(e, OSError | TimeoutError):
        return True
    return "Failed to reach API" in str(e)


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())


def task_failure(future: Any) -> str | None:
    """What ended a task's future, from this process only (asking a future for
    its ``state`` may call the API): the exception its thread raised, or the
    message of the state it returned."""
    wrapped = getattr(future, "wrapped_future", None)
    if hasattr(future, "state_details"):  # a task run inline: its final state
        message = getattr(future, "message", None)
    elif not isinstance(wrapped, concurrent.futures.Future) or not wrapped.done():
        return None
    else:
        e = wrapped.exception(timeout=0)
        message = _one_line(e) if e is not None else getattr(wrapped.result(timeout=0), "message", None)
    return " ".join(str(message).split())[:300] if message else None


def _health(api_url: str, timeout: float) -> str | None:
    """None when the API answers its health check, else why not."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as r:
            return None if r.status < 500 else f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        # It answered: a refusal (no such route, not signed in) is not a lost API.
        return None if e.code < 500 else f"HTTP {e.code}"
    except Exception as e:  # any failure to answer is the answer
        return _one_line(e)


class Quieted:
    """What one drive changed of this process to keep Prefect's background
    services off the terminal (the API log handler's errors, Prefect's loggers,
    the client's retries), to be put back at the drive's end
    (:meth:`restore`): a long-lived process (the MCP server, a library user)
    runs its next drive with retries and logs. Only what this drive changed is
    put back, and only where it still holds what the drive set: a change
    another drive made is that drive's to undo. ``abandoned``: this drive lost
    its API (Prefect's background services hold events they can never send:
    the CLI leaves without their drains)."""

    def __init__(self) -> None:
        self.abandoned = False
        self._lock = threading.Lock()
        self._changes: list[tuple[object, str, object, object]] = []  # (object, attribute, before, set)

    def _set(self, obj: object, attr: str, value: object) -> None:
        with self._lock:
            before = getattr(obj, attr)
            if before == value:
                return
            setattr(obj, attr, value)
            self._changes.append((obj, attr, before, value))

    def silence(self) -> None:
        """Prefect's background services' errors off the terminal: milepost says
        what happened to the API itself (the drive's warning, exit 3)."""
        self._set(logging, "raiseExceptions", False)  # the API log handler's "--- Error logging to API ---"
        for name in SILENCED:
            # (a level would not do: loggers cache what they may emit)
            self._set(logging.getLogger(name), "disabled", True)

    def quiet(self) -> None:
        """Once the API is gone, Prefect's background services (events, logs)
        fail on every item; they must not fill the user's terminal. (The store
        and milepost's own output say what happened.)"""
        self.abandoned = True
        self.silence()
        # Calls still in flight (a gate task taking its slots, the flow run's final
        # state) give up after their current try: Prefect's retry loop reads the
        # setting on every turn, and a server that is gone answers no retry.
        with contextlib.suppress(Exception):
            from prefect.settings import get_current_settings

            self._set(get_current_settings().client, "max_retries", 0)

    def restore(self) -> None:
        """Put back what this drive changed (see the class). Idempotent."""
        with self._lock:
            changes, self._changes = self._changes, []
            for obj, attr, before, value in reversed(changes):
                with contextlib.suppress(Exception):
                    if getattr(obj, attr) == value:
                        setattr(obj, attr, before)


SILENCED = ("prefect._internal", "prefect._internal.concurrency", "prefect.events", "prefect.client")


class PrefectGuard:
    """Watches the Prefect API of one drive and runs its best-effort calls."""

    def __init__(
        self,
        api_url: str | None,
        settings: Settings,
        on_lost: Callable[[PrefectUnreachableError], None],
        warn: Callable[[str], None],
        quieted: Quieted,
    ) -> None:
        self.url = api_url
        self.quieted = quieted  # what quieting Prefect changed, the drive's to restore
        self.settings = settings
        self.lost: PrefectUnreachableError | None = None
        self.lost_at: float | None = None
        self._on_lost = on_lost
        self._warn = warn
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._stop = threading.Event()
        self._answered_at = time.monotonic()  # the API's last answer (the flow run began: it answered)
        self._failing_since: float | None = None  # since when it has not answered (None: it answers)
        self._prober = threading.Thread(target=self._probe, name="milepost-prefect-probe", daemon=True)

    def start(self) -> PrefectGuard:
        if os.environ.get("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL") == "CRITICAL":  # the CLI's quiet console
            self.quieted.silence()
        if self.url:
            self._prober.start()
        return self

    def close(self) -> None:
        """Stop probing (the prober's thread ends within a second)."""
        self._stop.set()

    # -- loss ----------------------------------------------------------------

    def lose(self, why: str) -> None:
        """The API is gone (``why``): said once, acted on by the drive."""
        with self._lock:
            if self.lost is not None:
                return
            where = f"the Prefect API at {self.url}" if self.url else "the Prefect API"
            self.lost = PrefectUnreachableError(
                f"{where} stopped answering ({why}): no gate was started after that, the running ones finished"
                " and are recorded in the store; the flow run's record in the Prefect UI is incomplete."
                " Start the server again (milepost server start) and drive again",
                api=self.url or "",
            )
            self.lost_at = time.monotonic()
        self.quieted.quiet()
        self._on_lost(self.lost)

    def _probe(self) -> None:
        assert self.url is not None
        while not self._stop.wait(PROBE_SECONDS) and self.lost is None:
            self._ask()

    def _ask(self) -> bool:
        """Ask the API's health once and note the answer (returned: whether it
        answered); declared lost when it has not answered for the grace. (The
        prober's thread and the loop's ask.)"""
        assert self.url is not None
        # An answer tells the API was up when it was asked, not when its thread got to read it: on a loaded
        # machine an answer read late stood for "just now" after the server was killed, and a claim in flight
        # was started (tests/test_prefect_guard.py). Nor does it undo a failure seen after it was asked.
        asked = time.monotonic()
        why = _health(self.url, min(5.0, self.settings.prefect_timeout))  # a busy server answers slowly, not never
        now = time.monotonic()
        with self._lock:
            if why is None:
                if self._failing_since is None or asked > self._failing_since:
                    self._answered_at, self._failing_since = max(self._answered_at, asked), None
                return True
            if self._failing_since is None:
                self._failing_since = max(self._answered_at, now - PROBE_SECONDS)  # it answered then at best
            silent = now - self._failing_since
        if silent >= self.settings.prefect_grace:
            self.lose(f"no answer for {silent:.0f} s: {why}")
        return False

    def may_start(self, within: float = FRESH_SECONDS) -> bool:
        """Whether the drive may claim (or start) a milestone now: the API
        answered within ``within`` seconds (asked now when not: 0, always). While it
        does not answer this waits, until it answers again (True: a restart
        ridden out) or the grace has passed (False: lost), or the guard is closed."""
        if self.url is None:
            return self.lost is None
        with self._lock:
            if self._failing_since is None and time.monotonic() - self._answered_at < within:
                return True
        while self.lost is None and not self._stop.is_set():
            if self._ask():
                return True
            self._stop.wait(min(PROBE_SECONDS, self.settings.prefect_grace / 4))
        return False

    # -- calls -----------------------------------------------------------------

    def call(self, what: str, fn: Callable[[], T], default: T) -> T:
        """``fn()``, or ``default`` when the API is lost or the call fails
        (a warning, once per ``what``). Only the prober declares the API lost:
        a busy server answers a call with 503 now and then, after the client's
        retries too, and is not gone."""
        if self.lost is not None:
            return default
        try:
            return fn()
        except Exception as e:
            with self._lock:
                first = what not in self._warned
                self._warned.add(what)
            if first:
                self._warn(f"could not {what}: {_one_line(e)}; the drive goes on")
            return default
