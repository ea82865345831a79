"""The drive's flow-run heartbeat (flows/heartbeat.py): Prefect's event,
sent by milepost's own thread, which stops at once when the drive ends."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from milepost.flows.drive import run_drive
from milepost.flows.heartbeat import EVENT, Heartbeat, heartbeat_frequency, prefect_heartbeat_off
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.conftest import wait_until
from tests.flows.conftest import api_post


def heartbeats(api: str, flow_run_id: str) -> list[dict[str, Any]]:
    body = {
        "filter": {"event": {"name": [EVENT]}, "resource": {"id": [f"prefect.flow-run.{flow_run_id}"]}},
        "limit": 50,
    }
    return list(api_post(api, "/events/filter", body)["events"])


def test_a_drive_sends_one_heartbeat_with_prefects_resource_and_prefects_own_is_off(
    prefect_api: str, service: Service
) -> None:
    item = service.apply_plan(parse_plan("objective: beat\nmilestones:\n  - {name: a, gate: 'true'}\n")).id
    summary = run_drive(service, item)
    assert summary.ok and summary.flow_run_id
    from prefect._internal.concurrency.services import QueueService

    QueueService.drain_all(timeout=10, at_exit=False)  # send what the events worker still holds
    wait_until(lambda: heartbeats(prefect_api, summary.flow_run_id or ""), 30, "the drive's heartbeat event")
    time.sleep(1)  # a second one (Prefect's own thread) would have been sent with it
    beats = heartbeats(prefect_api, summary.flow_run_id or "")
    assert len(beats) == 1, beats  # the frequency is 180 s: one at the start, and not Prefect's too
    beat = beats[0]
    assert beat["resource"]["prefect.resource.name"].startswith(f"item-{item}: beat")
    roles = {r["prefect.resource.role"]: r["prefect.resource.id"] for r in beat["related"]}
    assert roles["flow"].startswith("prefect.flow.")
    assert heartbeat_frequency() == 180  # Prefect's setting is back as it was


def test_the_heartbeat_follows_prefects_setting_and_stops_at_once(prefect_api: str) -> None:
    with prefect_heartbeat_off():
        assert heartbeat_frequency() is None
    assert heartbeat_frequency() == 180
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 30}):
        assert heartbeat_frequency() == 30  # a user's frequency is what the drive's thread uses
    run = SimpleNamespace(id=uuid.uuid4(), name="r", flow_id=uuid.uuid4(), deployment_id=None, tags=["t"])
    beat = Heartbeat(run, "drive-workgraph", 3600).start()
    assert beat.resource["prefect.resource.id"] == f"prefect.flow-run.{run.id}"
    assert [r.role for r in beat.related] == ["flow", "tag"]
    beat.stop()  # joins for at most 2 s: a thread asleep for its hour would still be alive
    assert not beat._thread.is_alive()
