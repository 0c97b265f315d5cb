"""bench.spine — the write and read spine of mneme, each figure beside its floor, measured in one run.

    python -m bench.spine            # full run (a few minutes on 2 cores)
    python -m bench.spine --quick    # short run (well under 2 minutes)

What it measures (medians over interleaved rounds; latencies pooled over the rounds):

(a) floor: raw nats-py JetStream publishes of real, pre-encoded memory_created envelopes to
    MNEME_EVENTS, awaited one by one and pipelined (js.publish_async, many in flight);
(b) memory adds through the gateway's domain path in-process (CommandService.create), without
    store/path and with store+path (which asks the projector who owns the path first);
(c) memory_add over MCP stdio (ClientSession -> `mneme serve`) against a no-op MCPServer tool over
    stdio (bench/noop_server.py), in alternating blocks;
(d) add-then-get read-your-writes latency, in-process (create, then GetMemory with min_seq) and over
    MCP stdio (memory_add, then memory_get), counting every get that did not find its memory;
(e) get latency at 100,000 memories (10,000 with --quick): the log is loaded with pipelined,
    pre-encoded envelopes, a fresh projector folds it (fold rate), then gets by random id through the
    projector query path in-process and through MCP stdio (a `mneme serve` cold-started on that log).
(f) what an agent pays in context (bench.surface): each profile's tools/list in bytes, and the bytes of
    one 10-result memory_search (brief and full) and memory_list response over stdio.

Everything runs on 127.0.0.1 under one temporary directory that is removed at the end; every child
process (nats-server, `mneme serve`, the no-op server) is stopped, even on error. Progress goes to
stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
"""
