"""`mneme replay`: rebuild the read models from the log into a new generation, verify, swap (blue/green).

1. Connect to the log: --nats-url, else the embedded server of a `mneme serve` running on the
   data directory, else an embedded server of our own.
2. Build into `projections/building/` (resumed if a killed replay left one with the same
   settings), starting from the newest valid snapshot at or before the target, with a progress
   line (events/s, ETA). `--model` re-embeds with another model (the embedding cache makes an
   unchanged model's replay cheap).
3. Verify (rows and points agree with the versions, every read model covers the target).
4. Swap: rename it to `projections/gen-<time>`, point `projections/CURRENT` at it, and ask
   the live projector (if one runs) to open it, catch it up and serve from it; the old
   generation is removed once nothing reads it.

`--upto SEQ|TIME` or `--output DIR` build a frozen copy instead (no swap): the read models as
they stood then, for forensic work with DuckDB or `mneme serve --data-dir`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from mneme.domain import validation as v
from mneme.preflight import Refused, check_model, require_log
from mneme.runtime import (
    control_id,
    nats_connection,
    open_view,
    projection_dir,
    projections_root,
    set_current,
)
from mneme.settings import CoreSettings, ProjectorSettings
from mneme.vector_build import VectorBuild
from schemas import control
from schemas import subjects as S
from schemas.control import SwapReply, SwapRequest
from services.projector.memories_view import PROJECTION_VERSION
from services.projector.service import Projector, catch_up
from services.projector.snapshot import newest_snapshot, restore_snapshot, verify_generation

log = logging.getLogger("mneme.replay")
BUILDING = "building"


async def seq_at(js: JetStreamContext, t: datetime) -> int:
    """The last sequence the log recorded at or before `t` (0: nothing yet)."""
    head = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
    # the stream keeps nanoseconds, mneme reports microseconds: a sequence recorded within the microsecond
    # `t` names is at or before it
    cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=t + timedelta(microseconds=1))
    sub = await js.subscribe(S.EVENTS_SUBJECTS, stream=S.EVENTS_STREAM, ordered_consumer=True, config=cfg)
    try:
        msg = await sub.next_msg(timeout=1.0)
        return msg.metadata.sequence.stream - 1
    except nats.errors.TimeoutError:
        return head
    finally:
        await sub.unsubscribe()


def parse_upto(value: str | None) -> int | datetime | None:
    if value is None:
        return None
    if value.strip().isdigit():
        return int(value)
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        raise Refused(f"--upto: {value!r} is neither a sequence number nor an ISO 8601 time") from None
    t = v.utc(t, "upto")
    if t > datetime.now(UTC):
        raise Refused(f"--upto: {t.isoformat()} is in the future")
    return t


def check(
    core: CoreSettings, gps: ProjectorSettings, *, upto: str | None, output: Path | None, model: str | None
) -> int | datetime | None:
    """Everything a replay can be refused for before it connects or creates anything."""
    require_log(core)
    if gps.vectors != "off":
        check_model(gps.embedding_model, "--model" if model else "MNEME_PROJECTOR_EMBEDDING_MODEL")
    if output is not None and output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise Refused(f"--output {output} exists and is not empty")
    return parse_upto(upto)


async def target_of(js: JetStreamContext, bound: int | datetime | None, head: int) -> int:
    """The sequence a replay builds up to: the head, or --upto's; past the head is refused, as `as_of` is."""
    if bound is None:
        return head
    if isinstance(bound, datetime):
        return await seq_at(js, bound)
    if bound > head:
        raise Refused(f"--upto: sequence {bound} is beyond the head of the log ({head})")
    return bound


async def replay(
    core: CoreSettings,
    ps: ProjectorSettings,
    *,
    upto: str | None = None,
    output: Path | None = None,
    model: str | None = None,
    use_snapshots: bool = True,
    swap: bool = True,
    progress: Callable[[int, int, float], None] | None = None,
) -> dict[str, Any]:
    gps = ps.model_copy(update={"embedding_model": model}) if model else ps
    frozen = upto is not None or output is not None
    bound = check(core, gps, upto=upto, output=output, model=model)
    async with nats_connection(core, "mneme-replay", stack_embedded="attach") as nc:
        js = nc.jetstream()
        head = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
        target = await target_of(js, bound, head)
        root = projections_root(core)
        out = output or (root / (f"asof-{target}" if frozen else BUILDING))
        settings = {
            "model": gps.embedding_model if gps.vectors != "off" else None,
            "upto": target if frozen else None,
            "projection_version": PROJECTION_VERSION,
            "vectors": gps.vectors,
        }
        try:
            result = await build(
                core,
                gps,
                nc,
                out,
                settings,
                target=target,
                frozen=frozen,
                resumable=not output,
                use_snapshots=use_snapshots,
                progress=progress,
            )
        except Exception:
            # a failure leaves nothing half-built (only a kill leaves `building/`, for the next run to resume)
            discard(out, root)
            raise
        result = {"target_seq": result.pop("target_seq"), "head_seq": head, **result}
        if not result["verify"]["ok"]:
            discard(out, root)
            result["removed"] = str(out)
            raise ReplayFailed(result)
        if frozen or not swap:
            result["path"] = str(out)
            return result
        final = root / f"gen-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
        out.rename(final)
        previous = projection_dir(core)
        set_current(core, final)
        result["path"] = str(final)
        try:
            msg = await nc.request(
                S.control_subject(control_id(core), "swap"), control.encode(SwapRequest(path=str(final))), timeout=600
            )
            answer = control.decode_as(msg.data, SwapReply)
            if not answer.ok:
                raise ReplayFailed({**result, "swap": msgspec.to_builtins(answer)})
            result["swap"] = {"live": True, "serving_seq": answer.seq}
        except nats.errors.NoRespondersError:
            result["swap"] = {
                "live": False,
                "note": "no projector is running on this data directory; the next start serves the new generation",
            }
        result["removed"] = remove_generation(core, previous, gps)
        return result


def discard(out: Path, root: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    if out.parent == root:
        with contextlib.suppress(OSError):
            root.rmdir()  # only if nothing else is in it


async def build(
    core: CoreSettings,
    gps: ProjectorSettings,
    nc: Any,
    out: Path,
    settings: dict[str, Any],
    *,
    target: int,
    frozen: bool,
    resumable: bool,
    use_snapshots: bool,
    progress: Callable[[int, int, float], None] | None,
) -> dict[str, Any]:
    """Fold the log into `out` up to `target` (resuming a killed build with the same settings), verify it."""
    meta = out / "generation.json"
    resumed = False
    if out.exists():
        old: dict[str, Any] = json.loads(meta.read_text()) if meta.exists() else {}
        resumed = bool(old) and {k: old.get(k) for k in settings} == settings and resumable
        if not resumed:
            shutil.rmtree(out, ignore_errors=True)
    snapshot = None
    if not resumed and use_snapshots:
        found = newest_snapshot(core.data_dir / "snapshots", upto=target, model=settings["model"])
        if found:
            snapshot = found[1]["seq"]
            restore_snapshot(found[0], found[1], out, gps.db_name)
    out.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({**settings, "started": datetime.now(UTC).isoformat()}))
    view = open_view(core, gps, base=out)
    # the vectors fold in a process of their own, beside the rows (both cores; mneme/vector_build.py)
    child = VectorBuild(core, gps, out, target, nats_url=url_of(nc)) if gps.vectors != "off" else None
    try:
        if child is not None:
            await child.start()
        proj = Projector(nc, view, batch_max=gps.batch_max, stop_at=target, access=not frozen)
        start_seq = view.checkpoint
        t0 = time.monotonic()

        def both(done: int, tgt: int, secs: float) -> None:
            if progress:
                progress(min(done, child.applied) if child is not None else done, tgt, secs)

        await proj.start(serve_queries=False)
        try:
            await catch_up(proj, progress=both, target=target)
            if not frozen:  # access statistics up to the head of the access stream, too
                acc_head = (await nc.jetstream().stream_info(S.ACCESS_STREAM)).state.last_seq
                await proj.access_follower.wait_for(acc_head, 600)
        finally:
            await proj.stop()
        facts = None
        if child is not None:
            pending = asyncio.ensure_future(child.result())
            while not pending.done():
                await asyncio.wait({pending}, timeout=0.5)
                both(view.checkpoint, target, time.monotonic() - t0)
            facts = pending.result()
        seconds = time.monotonic() - t0
        report = verify_generation(view, facts, target)
        digest = view.canonical_digest()
        view.con.execute("CHECKPOINT")
        embedded = facts["embedded"] if facts is not None else 0
    finally:
        view.close()
        if child is not None:
            await child.kill()
    return {
        "target_seq": target,
        "resumed_from": start_seq,
        "snapshot_seq": snapshot,
        "events": target - start_seq,
        "seconds": round(seconds, 3),
        "events_per_s": round((target - start_seq) / seconds, 1) if seconds else None,
        "embedded": embedded,
        "model": settings["model"],
        "verify": report,
        "digest": digest,
    }


def url_of(nc: Any) -> str:
    """The URL a connection reached (the embedded server's, when it started one)."""
    return str(nc.connected_url.geturl())


class ReplayFailed(Exception):
    def __init__(self, result: dict[str, Any]):
        super().__init__(json.dumps(result.get("verify", result), default=str))
        self.result = result


def remove_generation(core: CoreSettings, gen_dir: Path, ps: ProjectorSettings) -> list[str]:
    """Delete a swapped-out generation: a directory under projections/, or the read models at the root."""
    if gen_dir == core.data_dir:
        gone = []
        for p in [core.data_dir / ps.db_name, core.data_dir / f"{ps.db_name}.wal", *core.data_dir.glob("vectors-*")]:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
            else:
                continue
            gone.append(p.name)
        return gone
    shutil.rmtree(gen_dir, ignore_errors=True)
    return [gen_dir.name]
