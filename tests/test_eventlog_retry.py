"""EventLog.append during a leader election (unit, with a stand-in for JetStream's publish): the same
message, with the same Nats-Msg-Id, is sent again until the publish timeout; a write that was sent and never
confirmed says it may have landed, one never sent says so."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from nats.js.errors import NoStreamResponseError

from mneme.errors import Unavailable
from mneme.eventlog import EventLog
from schemas import subjects as S

pytestmark = pytest.mark.anyio


class Stream:
    def __init__(self, failures: int, exc: type[Exception] = NoStreamResponseError):
        self.failures, self.exc = failures, exc
        self.sent: list[dict[str, str]] = []

    async def publish(self, subject: str, data: bytes, *, timeout: float, headers: dict[str, str]) -> Any:
        self.sent.append(dict(headers))
        if len(self.sent) <= self.failures:
            raise self.exc()
        return SimpleNamespace(seq=41, duplicate=len(self.sent) > 1)


async def test_no_leader_then_a_leader_lands_once_with_one_id() -> None:
    js = Stream(failures=3)
    log = EventLog(js, timeout=3.0)  # type: ignore[arg-type]
    assert await log.append("mneme.evt.x", b"{}", msg_id="m-1", expected_seq=0) == (41, True)
    assert len(js.sent) == 4 and {h[S.HDR_MSG_ID] for h in js.sent} == {"m-1"}


async def test_never_confirmed_within_the_timeout_says_it_may_have_landed() -> None:
    js = Stream(failures=10**6, exc=TimeoutError)
    log = EventLog(js, timeout=0.4)  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="may or may not have been applied"):
        await log.append("mneme.evt.x", b"{}", msg_id="m-2", expected_seq=None)
    assert len(js.sent) >= 2


async def test_disconnected_after_a_send_still_says_it_may_have_landed() -> None:
    js = Stream(failures=1)
    up = iter([True, True])  # connected for the first check and the first send, then gone
    log = EventLog(js, timeout=0.3, connected=lambda: next(up, False))  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="may or may not have been applied"):
        await log.append("mneme.evt.x", b"{}", msg_id="m-3", expected_seq=None)
    assert len(js.sent) == 1
    never = EventLog(Stream(failures=0), timeout=0.3, connected=lambda: False)  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="was not sent"):
        await never.append("mneme.evt.x", b"{}", msg_id="m-4", expected_seq=None)
