"""A gateway with no projector serving answers UNAVAILABLE at once-ish, not a misleading lag error."""

from __future__ import annotations

import time

import pytest

from mneme.app import compose
from mneme.app.compose import close_nats, connect
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.errors import MnemeError
from mneme.eventlog import ensure_streams
from schemas.queries import GetMemory

pytestmark = pytest.mark.anyio


async def test_no_projector_is_unavailable_not_lag(nats_server: EmbeddedNats) -> None:
    nc = await connect(nats_server.url or "", "test")
    try:
        await ensure_streams(nc.jetstream())
        gw = compose.gateway(nc, GatewaySettings(query_timeout=1.5))
        start = time.monotonic()
        with pytest.raises(MnemeError) as err:
            await gw.queries.ask(GetMemory(namespace="default", now=gw.now(), memory_id="x"))
        assert err.value.code == "UNAVAILABLE" and "no projector" in err.value.message
        assert time.monotonic() - start < 3
    finally:
        await close_nats(nc)
