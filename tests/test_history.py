"""The history checker (tests/history, issue 29 item 5): first on hand-made histories, so that it is shown to
catch each anomaly (a lost write, a duplicate, a version gap, ...); then on real runs: writers through two
gateways of a three-node cluster while a nemesis kills a node, pauses the stream leader and cuts one machine's
power (a short run here; a long one behind `slow`, whose figures are in docs/reliability.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.history.checker import (
    ADD,
    CREATED,
    FAIL,
    OK,
    UNKNOWN,
    UPDATE,
    UPDATED,
    History,
    LogEvent,
    Op,
    Replica,
    check,
    fold,
    outcome_of_error,
)
from tests.history.run import FAULTS, Config, run
from tests.powercut.control import PowerCutFS
from tests.powercut.fixtures import mounted_machines, unavailable

M1, M2 = "m-1", "m-2"


# -- hand-made histories -----------------------------------------------------------------------------------
def op(i: int, kind: str, rid: str, content: str, mid: str | None, t: float, outcome: str,
       version: int | None = None, seq: int | None = None, duplicate: bool = False) -> Op:  # fmt: skip
    o = Op(i, f"c{i % 2}", "gateway1", kind, rid, content, mid, t, t + 0.5, outcome)
    o.version, o.seq, o.duplicate = version, seq, duplicate
    o.error = None if outcome == OK else "UNAVAILABLE: did not confirm"
    return o


def ev(seq: int, kind: str, mid: str, version: int, rid: str, content: str) -> LogEvent:
    return LogEvent(seq, kind, mid, version, rid, content)


def clean() -> tuple[list[Op], list[LogEvent]]:
    """Two memories, one updated twice; an unknown write that landed, an unknown one that did not, a failed one
    (not logged), and a retry answered as a duplicate."""
    ops = [
        op(0, ADD, "r1", "a", M1, 0.0, OK, 1, 1),
        op(1, ADD, "r2", "b", M2, 1.0, UNKNOWN),  # indeterminate...
        op(2, ADD, "r2", "b", M2, 2.0, OK, 1, 2, duplicate=True),  # ...retried: it had landed
        op(3, UPDATE, "r3", "a2", M1, 3.0, OK, 2, 3),
        op(4, UPDATE, "r4", "b2", M2, 4.0, UNKNOWN),  # landed, never confirmed
        op(5, UPDATE, "r5", "a3", M1, 5.0, UNKNOWN),  # did not land
        op(6, UPDATE, "r6", "a4", M1, 6.0, FAIL),  # refused: not logged
        op(7, UPDATE, "r7", "a5", M1, 7.0, OK, 3, 5),
    ]
    log = [
        ev(1, CREATED, M1, 1, "r1", "a"),
        ev(2, CREATED, M2, 1, "r2", "b"),
        ev(3, UPDATED, M1, 2, "r3", "a2"),
        ev(4, UPDATED, M2, 2, "r4", "b2"),
        ev(5, UPDATED, M1, 3, "r7", "a5"),
    ]
    return ops, log


def replica_of(log: list[LogEvent], name: str = "projector1", digest: dict[str, str] | None = None) -> Replica:
    versions, memories = fold(log)
    return Replica(name, log[-1].seq, versions, memories, digest)


def test_a_clean_history_passes_and_is_counted() -> None:
    ops, log = clean()
    r = check(ops, log, [replica_of(log), replica_of(log, "projector2")], head=5)
    assert r.valid, r.explain()
    assert (r.writes, r.attempts, r.acknowledged, r.failed, r.unknown, r.unknown_applied) == (7, 8, 4, 1, 2, 1)


def test_a_lost_acknowledged_write_is_caught() -> None:
    ops, log = clean()
    log = [e for e in log if e.request_id != "r3"]  # the log forgot an acknowledged update
    log = [LogEvent(e.seq, e.type, e.memory_id, e.version - (e.memory_id == M1 and e.version > 2), e.request_id,
                    e.content) for e in log]  # (renumbered: the gap alone would not show it)  # fmt: skip
    r = check(ops, log)
    assert not r.valid and len(r.lost) == 1 and r.lost[0].startswith("r3:"), r.explain()


def test_an_unacknowledged_write_may_be_missing() -> None:
    ops, log = clean()
    r = check(ops, [e for e in log if e.request_id != "r4"])  # r4 was unknown: absent is allowed
    assert r.valid, r.explain()
    assert r.unknown_applied == 0


def test_a_write_applied_twice_is_caught() -> None:
    ops, log = clean()
    log.append(ev(6, UPDATED, M1, 4, "r7", "a5"))  # the retried update landed again, as a new version
    r = check(ops, log)
    assert len(r.duplicated) == 1 and r.duplicated[0].startswith("r7:"), r.explain()
    assert not r.valid


def test_a_version_gap_is_caught() -> None:
    ops, log = clean()
    log[4] = ev(5, UPDATED, M1, 4, "r7", "a5")  # M1: versions 1, 2, 4
    r = check(ops, log)
    assert any(g.startswith(M1) and "[1, 2, 4]" in g for g in r.version_gaps), r.explain()
    assert r.wrong_ack  # (and the acknowledgement said version 3)


def test_versions_out_of_log_order_or_without_a_create_are_caught() -> None:
    ops, log = clean()
    swapped = [log[0], log[1], ev(3, UPDATED, M1, 3, "r3", "a2"), log[3], ev(5, UPDATED, M1, 2, "r7", "a5")]
    assert check(ops, swapped).version_gaps
    headless = [e for e in log if e.memory_id != M2] + [ev(6, UPDATED, M2, 1, "r4", "b2")]
    assert any(g.startswith(M2) for g in check(ops, headless).version_gaps)


def test_a_failed_write_that_was_applied_is_caught() -> None:
    ops, log = clean()
    log.append(ev(6, UPDATED, M1, 4, "r6", "a4"))  # refused, yet in the log
    r = check(ops, log)
    assert len(r.failed_applied) == 1 and r.failed_applied[0].startswith("r6:"), r.explain()


def test_an_acknowledgement_that_disagrees_with_the_log_is_caught() -> None:
    ops, log = clean()
    ops[7].seq = 4  # the answer named another sequence than where the event is
    r = check(ops, log)
    assert len(r.wrong_ack) == 1 and r.wrong_ack[0].startswith("r7:"), r.explain()


def test_a_log_order_against_real_time_is_caught() -> None:
    ops, log = clean()
    # r3 completed (t=3.5) before r7 was invoked (t=7), yet the log puts r7 first
    log = [log[0], log[1], ev(3, UPDATED, M1, 2, "r7", "a5"), log[3], ev(5, UPDATED, M1, 3, "r3", "a2")]
    for o in ops:
        o.seq = None  # (so only the order is wrong, not the acknowledgements)
    r = check(ops, log)
    assert any(x.startswith("r7 ") for x in r.realtime), r.explain()


def test_events_nobody_wrote_and_altered_content_are_caught() -> None:
    ops, log = clean()
    r = check(ops, [*log, ev(6, UPDATED, M2, 3, "nobody", "x")])
    assert r.phantoms and r.phantoms[0].startswith("nobody:")
    log[2] = ev(3, UPDATED, M1, 2, "r3", "not what was sent")
    assert check(ops, log).corrupt


def test_a_replica_that_differs_from_the_log_or_the_replay_is_caught() -> None:
    ops, log = clean()
    digest = {"memories": "d1", "memory_versions": "d2"}
    good = replica_of(log, digest=digest)
    behind = replica_of(log[:-1], "behind", digest=digest)  # one event short, its checkpoint too
    lossy = replica_of(log, "lossy", digest=digest)
    lossy.versions = set(sorted(lossy.versions)[1:])  # a version row missing
    other = replica_of(log, "other", digest={**digest, "memories": "d3"})
    r = check(ops, log, [good, behind, lossy, other], replay_digest=digest, head=5)
    named = {d.split(":")[0] for d in r.divergent}
    assert named == {"behind", "lossy", "other"}, r.explain()
    assert any("checkpoint 4" in d for d in r.divergent)
    assert any("digest differs" in d and "memories" in d for d in r.divergent)


def test_errors_are_classified_ok_fail_or_unknown() -> None:
    assert outcome_of_error({"code": "CONFLICT"}) == FAIL
    assert outcome_of_error({"code": "INVALID_INPUT"}) == FAIL
    assert outcome_of_error({"code": "UNAVAILABLE", "message": "NATS is unreachable: the write was not sent"}) == FAIL
    unconfirmed = "the event log (NATS JetStream) did not confirm the write; it may or may not have been applied"
    assert outcome_of_error({"code": "UNAVAILABLE", "message": unconfirmed}) == UNKNOWN
    assert outcome_of_error({"code": "PROJECTION_LAG"}) == UNKNOWN
    assert outcome_of_error({"code": "UNSTRUCTURED"}) == UNKNOWN


def test_a_history_is_recorded_and_read_back(tmp_path: Path) -> None:
    h = History()
    a = h.invoke("c0", "gateway1", ADD, "r1", "a")
    b = h.invoke("c1", "gateway2", UPDATE, "r2", "b", M1)
    h.ok(a, memory_id=M1, version=1, seq=1, duplicate=False)
    h.close()  # b was in flight: unknown
    assert (a.outcome, b.outcome) == (OK, UNKNOWN) and a.completed is not None and a.completed >= a.invoked
    h.save(tmp_path / "h.jsonl")
    assert History.load(tmp_path / "h.jsonl").ops == h.ops


# -- real runs ---------------------------------------------------------------------------------------------
@pytest.fixture
def machines(tmp_path: Path) -> Iterator[list[PowerCutFS] | None]:
    """Three power-cut filesystems when FUSE is here; None otherwise (the runs then go without power cuts)."""
    if unavailable() is not None:
        yield None
        return
    yield from mounted_machines(tmp_path)


def _faults(wanted: tuple[str, ...], mounts: list[PowerCutFS] | None) -> tuple[str, ...]:
    return wanted if mounts is not None else tuple(f for f in wanted if "powercut" not in f)


@pytest.mark.anyio
async def test_a_short_run_with_faults_loses_nothing(tmp_path: Path, machines: list[PowerCutFS] | None) -> None:
    """~15 s of faults (a node SIGKILLed, the stream leader paused, a machine's power cut; without FUSE the
    cut is left out, said in the output) under four writers on two gateways."""
    cfg = Config(duration=8, faults=_faults(("kill", "pause", "powercut"), machines), fault_s=3, calm_s=1.5,
                 warmup_s=2, clients=4, catch_up_s=90)  # fmt: skip
    t0 = time.monotonic()
    res = await run(tmp_path, cfg, machines)
    print(json.dumps(res.summary()), "" if machines else "(no FUSE here: no power cut)")
    r = res.report
    assert r.lost == [] and r.duplicated == [] and r.failed_applied == [], r.explain()
    assert r.valid, f"{r.explain()}\nreplicas that did not catch up: {res.stalled}"
    assert set(res.faults) == set(cfg.faults), res.fault_log
    assert r.acknowledged > 100 and r.events >= r.acknowledged
    assert time.monotonic() - t0 < 150


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.anyio
async def test_a_long_run_with_faults_loses_nothing(tmp_path: Path, machines: list[PowerCutFS] | None) -> None:
    """Ten minutes of faults of every kind, six writers (python -m pytest -m slow tests/test_history.py -s); the
    same as `python -m tests.history.run --duration 600`."""
    cfg = Config(duration=600, faults=_faults(FAULTS, machines), fault_s=5, calm_s=3, clients=6, catch_up_s=180)
    res = await run(tmp_path, cfg, machines)
    print(json.dumps(res.summary(), indent=1))
    r = res.report
    assert r.lost == [] and r.duplicated == [] and r.failed_applied == [], r.explain()
    assert r.valid, f"{r.explain()}\nreplicas that did not catch up: {res.stalled}"
    assert sum(res.faults.values()) >= 40, res.faults
