"""The admin endpoint's in-memory operation log: bounded in what it keeps and in what runs."""

from __future__ import annotations

import pytest

from kcore.admin.kafka import AdminError
from kcore.admin.operations import DONE, FAILED, MAX_RUNNING, RUNNING, OperationLog


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


def test_an_operation_runs_then_finishes_or_fails():
    clock = Clock()
    log = OperationLog(clock)
    op = log.begin("dr", "stop")
    assert op.status == RUNNING and not op.finished.is_set()
    assert op.location == f"/v1/mirrors/dr/operations/{op.id}"
    assert log.get("dr", op.id) is op
    assert log.get("other", op.id) is None  # an id is found under its own mirror only
    op.phase = "waiting for sync"
    clock.ms = 1_500
    log.finish(op, {"topics": [{"topic": "t"}], "warning": "behind"})
    doc = op.document()
    assert doc["status"] == DONE and doc["phase"] is None
    assert (doc["started_ms"], doc["finished_ms"]) == (1_000, 1_500)
    assert doc["topics"] == [{"topic": "t"}] and doc["warning"] == "behind"
    assert op.finished.is_set()

    failed = log.begin("dr", "pause")
    log.fail(failed, AdminError(409, "INVALID_MIRROR_STATE", "t-0 is STOPPED", 158))
    assert failed.document()["status"] == FAILED
    assert failed.document()["error"] == {
        "error": "INVALID_MIRROR_STATE",
        "message": "t-0 is STOPPED",
        "error_code": 158,
    }
    assert [o.action for o in log.of_mirror("dr")] == ["stop", "pause"]


def test_the_log_forgets_the_oldest_finished_and_bounds_the_running():
    log = OperationLog(Clock(), kept=3)
    first, second, third = (log.begin("dr", "start") for _ in range(3))
    log.finish(second, {})
    fourth = log.begin("dr", "stop")  # full: the oldest finished one goes, running ones stay
    assert log.get("dr", second.id) is None
    assert all(log.get("dr", op.id) for op in (first, third, fourth))
    fifth = log.begin("dr", "stop")  # nothing finished to forget: kept grows past the bound
    assert len(log.of_mirror("dr")) == 4 and log.get("dr", fifth.id)

    busy = OperationLog(Clock())
    for _ in range(MAX_RUNNING):
        busy.begin("dr", "start")
    with pytest.raises(AdminError) as refused:
        busy.begin("dr", "start")
    assert refused.value.status == 503 and refused.value.error == "TOO_MANY_OPERATIONS"
