"""A repair reaches every projector replica (issue 30, item 3): the category index's rebuild is on the control
plane, with no queue group, so each replica repairs its own DuckDB file; a query in the queue group repaired
whichever one answered. Real nats-server, two projectors on one log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mneme.app import compose
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.embedded_nats import EmbeddedNats
from schemas import subjects as S
from schemas.queries import QUERY_TYPES, REPAIR_TYPES, ReindexCategories
from services.gateway.commands import utc_now
from services.projector.generation import close_generation
from tests.harness import start_stack

pytestmark = pytest.mark.anyio


def categories(view: object) -> int:
    return int(view.reader().execute("SELECT count(*) FROM categories").fetchall()[0][0])  # type: ignore[attr-defined]


async def test_a_category_reindex_repairs_every_replica(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    assert ReindexCategories.OPERATION in REPAIR_TYPES and ReindexCategories.OPERATION not in QUERY_TYPES
    stack = await start_stack(tmp_path / "a", nats_server)
    other_dir = tmp_path / "b"
    view = compose.open_view(CoreSettings(data_dir=other_dir), ProjectorSettings(), base=other_dir)
    other = compose.projector(stack.nc, view)
    await other.start()
    try:
        await other.serving.wait()
        for i in range(4):
            await stack.call("memory_add", content=f"fact {i}", store="s", path=f"team/area{i % 2}/f{i}")
        head = (await stack.nc.jetstream().stream_info(S.EVENTS_STREAM)).state.last_seq
        for p in (stack.projector, other):
            assert await p.follower.wait_for(head, 10)
        want = categories(stack.view)
        assert want == categories(view) > 0
        for v in (stack.view, view):  # the derived index is damaged in both replicas
            v.con.execute("DELETE FROM categories")
        got = await stack.gateway.queries.ask(
            ReindexCategories(namespace="default", now=utc_now(), min_seq=head, store="s")
        )
        assert got.added == want
        # both repaired, not only the one that answered (the first reply answers; the other finishes its own)
        deadline = asyncio.get_running_loop().time() + 10
        while (categories(stack.view), categories(view)) != (want, want):
            assert asyncio.get_running_loop().time() < deadline, (categories(stack.view), categories(view))
            await asyncio.sleep(0.05)
    finally:
        await other.stop()
        close_generation(other.gen)
        await stack.close()
