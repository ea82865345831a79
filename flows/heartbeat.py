"""The drive's flow-run heartbeat: Prefect's event, without Prefect's wait.

Prefect's sync flow engine sends a ``prefect.flow-run.heartbeat`` event every
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (180 by default; the server's
automations can use a missing heartbeat to find crashed flow runs) from a
thread that sleeps in one-second steps, and joins that thread when the flow
body returns: every flow run ends 0 to 1 s late (figures in docs/benchmarks.md).

``run_drive`` turns Prefect's heartbeat off for its flow run and starts this
one in the flow body instead: the same event with the same resource, at the
same frequency (the user's setting; none when it is unset), from a thread that
wakes at once when the drive stops. A flow run Prefect starts itself (a
deployment, ``milepost serve``) keeps Prefect's own.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect.settings import get_current_settings

EVENT = "prefect.flow-run.heartbeat"


def heartbeat_frequency() -> int | None:
    """Seconds between heartbeats as Prefect's settings say (None: off)."""
    return get_current_settings().flows.heartbeat_frequency


@contextmanager
def prefect_heartbeat_off() -> Iterator[None]:
    """Prefect's own heartbeat thread off for the flow runs started inside.
    (The current settings copied with that one change: Prefect's
    ``temporary_settings`` validates all of them again.)"""
    from prefect.context import SettingsContext, get_settings_context

    context = get_settings_context()
    now = context.settings
    off = now.model_copy(update={"flows": now.flows.model_copy(update={"heartbeat_frequency": None})})
    with SettingsContext(profile=context.profile, settings=off):
        yield


class Heartbeat:
    """Sends the flow run's heartbeat every ``seconds`` until ``stop()``."""

    def __init__(self, flow_run: Any, flow_name: str, seconds: int) -> None:
        from prefect import __version__
        from prefect.events.related import tags_as_related_resources
        from prefect.events.schemas.events import RelatedResource

        self.seconds = seconds
        self.resource = {
            "prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
            "prefect.resource.name": flow_run.name or "",
            "prefect.version": __version__,
        }
        related = []
        if flow_run.flow_id:
            related.append(
                RelatedResource.model_validate(
                    {
                        "prefect.resource.id": f"prefect.flow.{flow_run.flow_id}",
                        "prefect.resource.role": "flow",
                        "prefect.resource.name": flow_name,
                    }
                )
            )
        if flow_run.deployment_id:
            related.append(
                RelatedResource.model_validate(
                    {
                        "prefect.resource.id": f"prefect.deployment.{flow_run.deployment_id}",
                        "prefect.resource.role": "deployment",
                    }
                )
            )
        self.related = related + tags_as_related_resources(set(flow_run.tags or []))
        self._stop = threading.Event()
        # The flow run's context (its settings: the API URL) in the thread too, as Prefect's has.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._beat,), name="milepost-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _beat(self) -> None:
        from prefect.events import emit_event

        while True:
            with contextlib.suppress(Exception):  # like Prefect's: a missed heartbeat is not the drive's failure
                emit_event(event=EVENT, resource=self.resource, related=self.related)
            if self._stop.wait(self.seconds):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
