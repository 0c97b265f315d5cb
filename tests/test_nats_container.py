"""A round trip against the official NATS image (testcontainers), where a Docker engine exists.

The in-process stack (projector + auditor + gateway) runs against a `nats:2.11 -js` container
instead of the nats-server from the wheel: the code must not depend on the embedded broker. Without
a Docker engine, constructing the container fails at once (docker.errors.DockerException) and the
test skips with the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.harness import start_stack

pytestmark = [
    pytest.mark.anyio,
    # testcontainers' own modules use an API it has deprecated; not ours to fix
    pytest.mark.filterwarnings("ignore:The @wait_container_is_ready decorator is deprecated:DeprecationWarning"),
]

IMAGE = "nats:2.11"


@dataclass
class _Broker:
    """What start_stack needs of a broker: its URL."""

    url: str


def _container() -> Any:
    """A NATS container with JetStream, or pytest.skip when there is no Docker engine to run it."""
    from docker.errors import DockerException

    try:
        from testcontainers.community.nats import NatsContainer
    except ImportError:  # older layout
        try:
            from testcontainers.nats import NatsContainer
        except ImportError:
            NatsContainer = None  # type: ignore[assignment,misc]
    started = time.monotonic()
    try:
        if NatsContainer is not None:
            return NatsContainer(IMAGE, jetstream=True)
        from testcontainers.core.container import DockerContainer

        return DockerContainer(IMAGE).with_command("-js").with_exposed_ports(4222)
    except DockerException as exc:
        took = time.monotonic() - started
        assert took < 10, f"finding out that there is no Docker engine took {took:.1f} s"
        pytest.skip(f"no Docker engine to run {IMAGE}: {exc}")


async def test_round_trip_against_the_official_nats_image(tmp_path: Path) -> None:
    container = _container()
    with anyio.fail_after(180):  # an image pull may be slow; a hang must still end
        await anyio.to_thread.run_sync(container.start)
        if not hasattr(container, "nats_uri"):  # plain DockerContainer: wait for the server itself
            from testcontainers.core.waiting_utils import wait_for_logs

            await anyio.to_thread.run_sync(lambda: wait_for_logs(container, "Server is ready", timeout=60))
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(4222)
        broker = _Broker(url=f"nats://{host}:{port}")
        stack = await start_stack(tmp_path / "data", broker)  # type: ignore[arg-type]
        try:
            added = await stack.call("memory_add", content="stored in a container", store="s", path="box/one")
            mem = added
            assert mem["version"] == 1 and mem["seq"] == await stack.last_seq() == 1
            got = await stack.call("memory_get", store="s", path="box/one")
            assert got["id"] == mem["id"] and got["content"] == "stored in a container"
            by_id = await stack.call("memory_get", id=mem["id"])
            assert by_id["path"] == "box/one"
            assert stack.projector.applied >= mem["seq"]
        finally:
            await stack.close()
    finally:
        await anyio.to_thread.run_sync(container.stop)
