"""`mneme status`: the operator's view of a running mneme, from NATS alone.

- streams: messages, bytes and sequences of the event log, the access stream and the dead letters;
- consumers: every consumer on those streams (the followers' ordered consumers), with what they have yet
  to deliver;
- services: every process that beats (mneme/heartbeat.py): a serve, gateways, projector replicas, auditors,
  each with its followers' positions, its lag in events and in seconds, dead letters it skipped, its calls
  and refusals;
- the projector's answer to a status query (counts, the embedding model, its cache);
- dead letters: how many, by consumer, and the newest few with their reasons;
- data sizes of the data directory, when it is on this machine.

`healthy` is false when NATS cannot be reached, no projector answers, a service has stopped beating, the
embedding model failed, or a follower is more than `LAG_ALARM_S` seconds behind.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from mneme.heartbeat import services
from schemas import subjects as S
from schemas.dead_letter import decode_dead_letter

LAG_ALARM_S = 60.0
STREAMS = (S.EVENTS_STREAM, S.ACCESS_STREAM, S.DEAD_LETTER_STREAM)


def _on_disk(path: str) -> int:
    """Bytes a file takes on disk (its allocated blocks, as `du` and `mneme snapshot` count them): the vector
    shard's files are sparse, 250 MiB apparent for under 1 MiB written."""
    st = os.lstat(path)
    return st.st_blocks * 512


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += _on_disk(os.path.join(root, f))
            except OSError:
                pass
    return total


def data_sizes(data_dir: Path) -> dict[str, int]:
    """Bytes on disk under each top-level entry of the data directory (nats, projections, vectors, the
    trail, ...)."""
    if not data_dir.is_dir():
        return {}
    out = {}
    for entry in sorted(data_dir.iterdir()):
        try:
            out[entry.name] = dir_size(entry) if entry.is_dir() else _on_disk(str(entry))
        except OSError:
            pass
    return out


async def _streams(js: JetStreamContext) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in STREAMS:
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            out[name] = None
            continue
        st = info.state
        consumers = []
        try:
            for c in await js.consumers_info(name):
                consumers.append(
                    {
                        "name": c.name,
                        "pending": c.num_pending,
                        "delivered": c.delivered.stream_seq if c.delivered else None,
                        "ordered": c.config.durable_name is None,
                    }
                )
        except Exception:  # noqa: BLE001 - a user without the listing permission still sees the stream
            consumers = []
        out[name] = {
            "messages": st.messages,
            "bytes": st.bytes,
            "first_seq": st.first_seq,
            "last_seq": st.last_seq,
            "consumers": consumers,
        }
    return out


async def _lag_seconds(js: JetStreamContext, stream: str, applied: int, head: int, cache: dict[Any, float]) -> float:
    """How long ago the oldest message a follower has not applied was recorded (0: none)."""
    if head <= applied:
        return 0.0
    key = (stream, applied + 1)
    if key not in cache:
        try:
            msg = await js.get_msg(stream, seq=applied + 1)
            recorded = getattr(msg, "time", None)
            cache[key] = max(0.0, time.time() - recorded.timestamp()) if recorded is not None else 0.0
        except Exception:  # noqa: BLE001 - purged or deleted: no age
            cache[key] = 0.0
    return round(cache[key], 3)


async def _dead_letters(js: JetStreamContext, newest: int = 5) -> dict[str, Any]:
    try:
        info = await js.stream_info(S.DEAD_LETTER_STREAM, subjects_filter=S.DEAD_LETTER_SUBJECTS)
    except NotFoundError:
        return {"total": 0, "by_consumer": {}, "newest": []}
    st = info.state
    by = {subj.removeprefix(S.DEAD_LETTER_PREFIX + "."): n for subj, n in (st.subjects or {}).items()}
    letters = []
    for seq in range(st.last_seq, max(st.first_seq, st.last_seq - newest + 1) - 1, -1):
        if seq <= 0:
            break
        try:
            d = decode_dead_letter((await js.get_msg(S.DEAD_LETTER_STREAM, seq=seq)).data or b"")
        except Exception:  # noqa: BLE001 - deleted, or not a dead letter
            continue
        letters.append({"consumer": d.consumer, "stream": d.stream, "seq": d.seq, "reason": d.reason})
    return {"total": st.messages, "by_consumer": by, "newest": letters}


async def _projector(nc: NATS, timeout: float) -> dict[str, Any] | None:
    from schemas.queries import ProjectorStatus
    from services.gateway.commands import utc_now
    from services.gateway.queries import QueryClient

    try:
        s = await QueryClient(nc, timeout=timeout).ask(ProjectorStatus(namespace="default", now=utc_now()))
    except Exception as exc:  # noqa: BLE001 - none answered: reported as such
        return {"error": f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"}
    return {
        "memories": s.memories,
        "entities": s.entities,
        "relations": s.relations,
        "code_chunks": s.code_chunks,
        "model": s.model,
        "model_status": s.model_status,
        "model_error": s.model_error,
        "cache": {"hits": s.cache_hits, "misses": s.cache_misses, "size": s.cache_size},
        "applied_seq": s.applied_seq,
        "head_seq": s.head_seq,
        "lag_events": s.lag_events,
        "lag_seconds": s.lag_seconds,
        "vectors_applied": s.vectors_applied,
    }


async def gather(nc: NATS, data_dir: Path | None, *, timeout: float = 3.0) -> dict[str, Any]:
    js = nc.jetstream()
    streams, beats, dead, projector = await asyncio.gather(
        _streams(js), services(js), _dead_letters(js), _projector(nc, timeout), return_exceptions=True
    )
    problems: list[str] = []
    if isinstance(beats, BaseException):
        problems.append(f"could not read the services' heartbeats: {type(beats).__name__}: {beats}")
        beats = []
    for name, part in (("streams", streams), ("dead letters", dead)):
        if isinstance(part, BaseException):
            raise RuntimeError(f"could not read the {name} from NATS: {part}") from part
    assert not isinstance(streams, BaseException) and not isinstance(dead, BaseException)
    assert not isinstance(projector, BaseException)  # (_projector reports its own errors)
    heads = {name: (s or {}).get("last_seq", 0) for name, s in streams.items()}
    cache: dict[Any, float] = {}
    for svc in beats:
        if svc["state"] != "up":
            problems.append(f"{svc['key']}: no heartbeat for {svc['age']} s")
        for part in ("projector", "auditor"):
            for consumer, f in (svc.get(part) or {}).items():
                if not isinstance(f, dict):
                    continue
                head = heads.get(f["stream"], 0)
                f["lag_events"] = max(0, head - f["applied"])
                f["lag_seconds"] = await _lag_seconds(js, f["stream"], f["applied"], head, cache)
                if f.get("stalled"):
                    problems.append(f"{svc['key']} {consumer}: stalled, {f['stalled']}")
                if f["lag_seconds"] > LAG_ALARM_S:
                    problems.append(f"{svc['key']} {consumer}: {f['lag_seconds']} s behind {f['stream']}")
        if isinstance(why := (svc.get("projector") or {}).get("rebuilding"), str):
            problems.append(f"{svc['key']}: read models ahead of the log, rebuilding them ({why})")
    if projector is None or "error" in projector:
        problems.append("no projector answered a status query")
    elif projector["model_status"] == "error":
        problems.append(f"embedding model: {projector['model_error']}")
    if not beats and not any(p.startswith("could not read the services") for p in problems):
        problems.append("no service is beating (nothing running, or an older version)")
    return {
        "healthy": not problems,
        "problems": problems,
        "nats": {"url": str(nc.connected_url.geturl()) if nc.connected_url else None, "version": _version(nc)},
        "streams": streams,
        "services": beats,
        "projector": projector,
        "dead_letters": dead,
        "data_dir": str(data_dir) if data_dir else None,
        "data_bytes": data_sizes(data_dir) if data_dir else {},
    }


def _version(nc: NATS) -> str | None:
    v = nc.connected_server_version
    if not (v.major or v.minor or v.patch):
        return None
    return f"{v.major}.{v.minor}.{v.patch}" + (f"-{v.prerelease}" if v.prerelease else "")


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def render(d: dict[str, Any]) -> str:
    """The status as a few readable lines (the same facts as --json, fewer of them)."""
    lines = [f"mneme: {'healthy' if d['healthy'] else 'NOT HEALTHY'}  (nats {d['nats']['url']})"]
    lines += [f"  ! {p}" for p in d["problems"]]
    lines.append("streams:")
    for name, s in d["streams"].items():
        if s is None:
            lines.append(f"  {name}: missing")
            continue
        lines.append(
            f"  {name}: {s['messages']} messages, {_bytes(s['bytes'])}, seq {s['first_seq']}..{s['last_seq']}, "
            f"{len(s['consumers'])} consumers"
        )
        for c in s["consumers"]:
            lines.append(f"    consumer {c['name']}: delivered {c['delivered']}, pending {c['pending']}")
    lines.append("services:")
    for svc in d["services"]:
        lines.append(f"  {svc['key']} ({svc['state']}, beat {svc['age']} s ago, version {svc.get('version')})")
        for part in ("projector", "auditor"):
            for consumer, f in (svc.get(part) or {}).items():
                if isinstance(f, dict):
                    lines.append(
                        f"    {consumer}: applied {f['applied']} of {f['stream']}, lag {f['lag_events']} events / "
                        f"{f['lag_seconds']} s, dead letters {f['dead_letters']}"
                    )
        for r in (svc.get("projector") or {}).get("rebuilds", []):
            lines.append(f"    read models rebuilt at {r['at']} ({r['events']} events, {r['seconds']} s): {r['why']}")
        for r in (svc.get("auditor") or {}).get("realigned", []):
            lines.append(
                f"    audit trail ahead of the log ({r['source']}): {r['records']} record(s) kept as evidence, "
                f"recording again from #{r['rewound_to'] + 1}"
            )
        if gw := svc.get("gateway"):
            paced = f", {gw['paced_writes']} writes paced by the index" if gw.get("paced_writes") else ""
            lines.append(
                f"    gateway: {gw['calls']} calls, {gw['in_flight']} in flight, {gw['rate_limited']} rate-limited"
                + paced
            )
    p = d["projector"]
    if p and "error" not in p:
        lines.append(
            f"projection: {p['memories']} memories, {p['entities']} entities, {p['code_chunks']} code chunks; "
            f"model {p['model']} {p['model_status']}; lag {p['lag_events']} events / {p['lag_seconds']} s"
        )
    dl = d["dead_letters"]
    lines.append(f"dead letters: {dl['total']}" + (f" {dl['by_consumer']}" if dl["by_consumer"] else ""))
    for letter in dl["newest"]:
        lines.append(f"  {letter['consumer']}: {letter['stream']} #{letter['seq']}: {letter['reason']}")
    if d["data_bytes"]:
        sizes = ", ".join(f"{k} {_bytes(v)}" for k, v in d["data_bytes"].items())
        lines.append(f"data ({d['data_dir']}): {sizes}")
    return "\n".join(lines)
