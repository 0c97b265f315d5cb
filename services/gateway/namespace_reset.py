"""Resetting a namespace: every memory, entity, relation and code project of it deleted, each by its own event,
then the reset itself recorded as one `namespace_reset` event (schemas/namespace_events.py).

What memory-mcp's reset_all_memory and the native memory_reset do. Each delete is an ordinary, audited event
that every projection already folds, so the history before the reset stays in the log and readable with
`as_of` at `before_seq`; the closing event gives the audit trail one entry with who, why and the counts.
Memories this caller may not delete (locked, protected kinds) stay, counted as `kept`. A retry with the same
request id records the reset once.
"""

from __future__ import annotations

from mneme.errors import MnemeError
from mneme.ids import envelope
from schemas import subjects as S
from schemas.commands import DeleteMemory
from schemas.events import encode_envelope
from schemas.namespace_events import NamespaceReset
from schemas.queries import CodeProjects, GraphEntities, ListMemories
from services.gateway.code_indexer import status_query
from services.gateway.gateway import Call

SKIPPED = ("MEMORY_NOT_FOUND", "MEMORY_LOCKED", "WRITE_NOT_ALLOWED", "PERMISSION_ERROR")
BATCH = 500


async def reset(call: Call, reason: str) -> NamespaceReset:
    """Reset the call's namespace; the `namespace_reset` event recorded (its counts and `before_seq`)."""
    gw = call.gw
    actor, rid = call.principal.actor, call.request_id
    before = await gw.log.last_seq()
    memories = skipped = 0
    while True:
        got = await gw.queries.ask(
            ListMemories(
                namespace=call.namespace,
                now=gw.now(),
                min_seq=await gw.min_seq(),
                status="any",
                include_expired=True,
                sort_by="created_at",
                sort_order="asc",
                limit=BATCH,
                offset=skipped,
            )
        )
        if not got.items:
            break
        for row in got.items:
            cmd = DeleteMemory(namespace=call.namespace, memory_id=row.memory.id, permanent=True, reason=reason)
            try:
                w = await gw.commands.delete(cmd, actor=actor, request_id=rid, min_seq=await gw.min_seq())
            except MnemeError as exc:
                if exc.code not in SKIPPED:
                    raise
                skipped += 1
                continue
            gw.noted(w.seq)
            memories += 1
    entities, relations = 0, set[str]()
    while True:
        graph = await gw.queries.ask(
            GraphEntities(
                namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(), limit=BATCH, relations="either"
            )
        )
        if not graph.entities:
            break
        relations.update(r.id for r in graph.relations)
        gone = await gw.graph.delete_entities(
            call.namespace, [e.name for e in graph.entities], actor, rid, await gw.min_seq(), reason=reason
        )
        gw.noted(gone.seq)
        entities += gone.deleted
        if gone.deleted == 0:  # nothing could be deleted: stop rather than loop
            break
    chunks = 0
    projects = await status_query(
        gw.queries, CodeProjects(namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq())
    )
    for p in projects.projects:
        gw.noted(await gw.code.delete(call.namespace, p.project_id, actor, rid))
        chunks += p.total_chunks
    ev = NamespaceReset(
        reason=reason,
        before_seq=before,
        memories=memories,
        entities=entities,
        relations=len(relations),
        code_chunks=chunks,
        kept=skipped,
    )
    key = f"reset:{call.namespace}:{rid}"
    env = envelope(key, call.namespace, "reset", ev, actor, rid, gw.now())
    seq, _ = await gw.log.append(
        S.namespace_subject(call.namespace, "reset"), encode_envelope(env), msg_id=key, expected_seq=None
    )
    gw.noted(seq)
    return ev
