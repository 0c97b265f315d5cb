"""bench.audit — the compliance trail under write load: its lag and its throughput, each beside a floor.

    python -m bench.audit            # full run (about 2 minutes on 2 cores)
    python -m bench.audit --quick    # short run (well under 2 minutes)
    options: --keep (keep the temporary directory), --paced-only, and for experiments
    --rate, --seconds, --path-every, --stores, --read-every

Two phases, each against its own embedded nats-server on 127.0.0.1 (streams from ensure_streams):

(1) paced writes. Writes at a fixed rate (1,000/s: 20 s measured after 2 s of warm-up; 5 s after 1 s
    with --quick) go through the gateway's core (`Gateway.run` around `CommandService.create`, the
    body of the memory_add tool without MCP framing); every 10th write claims a store+path (a
    PathOwner query to a projector first; 64 stores); after every 20th write a memory_get body (two
    GetMemory queries) leaves a read record through the gateway's AccessLog. Open loop: a write that
    waits on a slow projector does not delay the next one. The run says whether the rate held and how
    much CPU other processes on the machine took meanwhile. Twice, one deployment shape each:
    (1a) distributed: this process is the gateway only; `mneme projector --nats-url` answers the write
      path's queries; the real `mneme auditor --nats-url URL --data-dir DIR` (untouched: verified and
      counted afterwards, and asked one audit query for the last write) and a probe auditor
      (`python -m bench.audit --probe-auditor`: the Auditor's two followers with AuditorSettings
      defaults, around a trail that notes when each commit finished) each run in their own process;
    (1b) serve: this process holds the gateway, a projector, and an Auditor whose own two followers
      fold the log into the trail and which answers audit queries, wired as in `mneme serve`.
    Lag of a record = wall time its commit finished − the log's timestamp for it (`recorded_at`, the
    stream's own time). DuckDB lets one process hold a file, so the probe notes (first, last trail
    sequence, wall time) per commit and the lags are read from the file after it closes. Floor: the
    delivery lag of a raw ordered consumer in this process (receive time − stream time).
(2) catch-up from a backlog: a fresh log of 100,000 events (20,000 with --quick; bench.synthetic
    history: creates, updates, moves, archives, deletes) plus one read record per 10 events. Per
    round, in a rotating order: the floor (two raw ordered consumers, events and access, receiving and
    decoding every message in this process), the Auditor's followers into a fresh trail in this
    process, and the real `mneme auditor` on a fresh data dir (timed from when it first answers an
    audit query, i.e. its followers are running, until an audit query shows every record committed).

Every trail is verified at the end (hash chain unbroken; records = events + access records, per
source); a failure is printed and the process exits 1 after the JSON line. Everything runs under
one temporary directory that is removed at the end; every child process is stopped, even on error.
Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
"""
