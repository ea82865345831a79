"""The Prefect guard's answer to "may the drive claim a milestone now?"
(flows/prefect_guard.py, PrefectGuard.may_start), against a real HTTP server
standing in for the API's /health: no Prefect needed, so `make test-fast` runs it."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Iterator

import pytest

from milepost.errors import PrefectUnreachableError
from milepost.flows.prefect_guard import SILENCED, PrefectGuard, Quieted
from milepost.settings import Settings
from tests.conftest import wait_until


class _Health(http.server.BaseHTTPRequestHandler):
    asked: list[str]

    def do_GET(self) -> None:
        self.asked.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, format: str, *args: object) -> None:  # (quiet)
        pass


class _Api:
    """A /health that answers, on a port that can be closed (the server gone)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        handler = type("Handler", (_Health,), {"asked": self.asked})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def kill(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[_Api]:
    a = _Api()
    try:
        yield a
    finally:
        a.kill()


def _guard(url: str, grace: float) -> tuple[PrefectGuard, list[PrefectUnreachableError]]:
    lost: list[PrefectUnreachableError] = []
    # (Not started: no prober; may_start asks by itself.)
    settings = Settings(prefect_grace=grace, prefect_timeout=2)
    return PrefectGuard(url, settings, lost.append, lambda _: None, Quieted()), lost


def test_a_claim_asks_the_api_once_when_its_last_answer_is_not_fresh(api: _Api) -> None:
    guard, lost = _guard(api.url, 5)
    assert guard.may_start(0.0) is True
    assert api.asked == ["/api/health"]  # asked once, not until it is "fresh" again
    assert guard.may_start() is True  # answered just now: not asked again
    assert api.asked == ["/api/health"] and lost == []


def test_no_claim_once_the_server_is_gone_and_the_loss_is_declared_after_the_grace(api: _Api) -> None:
    guard, lost = _guard(api.url, 0.6)
    api.kill()
    assert guard.may_start(0.0) is False  # waited for the grace, then lost
    assert guard.lost is not None and lost == [guard.lost]
    assert "stopped answering" in guard.lost.message
    assert guard.may_start() is False  # and stays lost
    guard.quieted.restore()  # (the loss quieted Prefect's logging in this process: put back)


def test_a_server_back_within_the_grace_is_ridden_out() -> None:
    a = _Api()
    port = a.server.server_address[1]
    guard, lost = _guard(a.url, 30)
    a.kill()
    back: list[http.server.ThreadingHTTPServer] = []

    def restart() -> None:
        handler = type("Handler", (_Health,), {"asked": a.asked})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        back.append(server)
        server.serve_forever()

    answered: list[bool] = []
    asking = threading.Thread(target=lambda: answered.append(guard.may_start(0.0)))
    asking.start()
    wait_until(lambda: guard._failing_since is not None, 10, "the guard to see the server gone")
    threading.Thread(target=restart, daemon=True).start()
    asking.join(30)
    try:
        assert answered == [True] and lost == []
    finally:
        for server in back:
            server.shutdown()
            server.server_close()


def test_quieting_is_undone_at_the_drives_end_and_only_what_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a drive's Quieted changed (raiseExceptions, Prefect's loggers) is
    put back by its restore; what another drive changed first is that one's."""
    loggers = [logging.getLogger(n) for n in SILENCED]
    monkeypatch.setattr(logging, "raiseExceptions", True)  # (as a process starts; put back after the test)
    for lg in loggers:
        monkeypatch.setattr(lg, "disabled", False)
    assert logging.raiseExceptions is True and not any(lg.disabled for lg in loggers)
    first, second = Quieted(), Quieted()
    first.silence()
    assert logging.raiseExceptions is False and all(lg.disabled for lg in loggers)
    second.silence()  # found quiet: changes nothing, so restores nothing
    second.restore()
    assert logging.raiseExceptions is False and all(lg.disabled for lg in loggers)
    first.restore()
    assert logging.raiseExceptions is True and not any(lg.disabled for lg in loggers)
    first.restore()  # (idempotent)
    assert logging.raiseExceptions is True


def test_an_answer_read_late_counts_from_when_it_was_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prober asked while the server was up; its thread read the answer
    only after the server was killed (a loaded machine): that answer must not
    make a claim in flight look freshly allowed. Seen once in a loaded run of
    the killed-server fault test: the claim's gate started after the kill."""
    import time

    from milepost.flows import prefect_guard

    entered, release = threading.Event(), threading.Event()
    gone = threading.Event()

    def health(url: str, timeout: float) -> str | None:
        if threading.current_thread().name == "late-prober":
            entered.set()
            release.wait(10)
            return None  # the answer it got while the server was up, read now
        return "connection refused" if gone.is_set() else None

    monkeypatch.setattr(prefect_guard, "_health", health)
    guard, lost = _guard("http://127.0.0.1:9/api", 0.6)
    prober = threading.Thread(target=guard._ask, name="late-prober")
    prober.start()
    assert entered.wait(10)
    gone.set()  # the server is killed while that answer waits to be read
    time.sleep(0.3)  # (longer than CLAIMED_FRESH_SECONDS: the time this test is about)
    release.set()
    prober.join(10)
    try:
        assert guard.may_start(prefect_guard.CLAIMED_FRESH_SECONDS) is False  # asked again: gone, then lost
        assert guard.lost is not None and lost == [guard.lost]
    finally:
        guard.quieted.restore()
