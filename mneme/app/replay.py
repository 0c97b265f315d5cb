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

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from mneme.app.build import BuildFailed, build, head_of
from mneme.app.compose import control_id, nats_connection
from mneme.app.generations import BUILDING, discard, projection_dir, projections_root, promote, remove_generation
from mneme.app.preflight import Refused, check_model, require_log
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.domain import validation as v
from schemas import control
from schemas import subjects as S
from schemas.control import SwapReply, SwapRequest

log = logging.getLogger("mneme.app.replay")
ReplayFailed = BuildFailed  # the name the command line and the benchmarks know


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
    fresh: bool = False,
    progress: Callable[[int, int, float], None] | None = None,
) -> dict[str, Any]:
    """`fresh`: fold from the start, never resuming what a killed replay left (`mneme rebuild` beside a server)."""
    gps = ps.model_copy(update={"embedding_model": model}) if model else ps
    frozen = upto is not None or output is not None
    bound = check(core, gps, upto=upto, output=output, model=model)
    async with nats_connection(core, "mneme-replay", stack_embedded="attach") as nc:
        js = nc.jetstream()
        head = await head_of(nc)
        target = await target_of(js, bound, head)
        root = projections_root(core)
        out = output or (root / (f"asof-{target}" if frozen else BUILDING))
        try:
            result = await build(
                core,
                gps,
                nc,
                out,
                target=target,
                frozen=frozen,
                resumable=not output and not fresh,
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
        previous = projection_dir(core)
        final = promote(core, out)
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
