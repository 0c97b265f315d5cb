"""bench.replay — rebuilding the read models from the log, beside the raw receive-and-decode floor,
and as_of reads at that size.

    python -m bench.replay            # full run: 1,000,000 events over 200,000 memories
    python -m bench.replay --quick    # 100,000 events over 20,000 memories
    options: --keep (keep the temporary directory), --no-profile (no py-spy), --no-vectors-only,
             --cache PATH (the embedding cache; default ~/.cache/mneme-bench/embeddings.sqlite),
             --fresh-cache (a cache in the temporary directory, filled in this run), and for experiments
             --events N --memories N --pool N --queries N

One embedded nats-server on 127.0.0.1 (streams from ensure_streams), one temporary directory.

(0) the log: `bench.synthetic.history(events, n_memories=memories, namespaces=4)` (its mix: creates,
    then updates with new content and importance, moves, archives/restores, deletes; versions and
    paths consistent), published pipelined. Every content (creates and content updates) is replaced
    by a sentence drawn from a pool of `pool` distinct sentences (50,000 full, 10,000 quick), so the
    embedding cache can hold every text: history()'s own texts are 12 random words, all distinct,
    and embedding ~800,000 of them at ~700/s would take 20 minutes. The pool is deterministic; its
    vectors are put in the embedding cache before anything is timed (texts already there are
    skipped: the default cache under ~/.cache/mneme-bench/ persists across runs; the run reports
    how many it embedded and how long that took).
(1) floor: an ordered push consumer with a callback (what LogFollower uses) that receives every
    message of MNEME_EVENTS from the start, reads its stream sequence and decodes the envelope
    (schemas.events.decode_envelope). Three times, interleaved with the replays; the median.
(2) replays, the embedding cache warm (none may embed a text: checked):
    full:         mneme.app.replay.replay(core, ps, use_snapshots=False, swap=False, output=DIR): the
                  DuckDB view and the Qdrant Edge index, each with its own follower, as `mneme
                  replay --output` runs them. Its `seconds` (start -> both caught up) gives events/s.
    DuckDB only:  the same with ProjectorSettings(vectors="off").
    vectors only: a LogFollower into a VectorView (open_vectors: Edge + BM25 + cache), the same
                  batch size and linger as the replay's, timed start -> committed the last event;
                  its parts (stage, BM25, cache, Edge upsert / set_payload / retrieve, checkpoint)
                  are timed through wrappers on the instance.
    Ratio = events/s / floor events/s; target: the full replay >= 0.50. py-spy (if installed in the
    venv) samples this process during the DuckDB-only and vectors-only replays (not during the full
    one) and the run prints where the CPU went. Both DuckDB files are verified by replay() itself
    (verify_generation), must have equal canonical digests, and must hold a version for every one of
    the sequences 1..N (every event of this log makes one: a missing one was never folded). A replay
    that applies nothing for 90 s is stopped and reported as stalled. The NATS trouble of each phase
    is counted: "Slow Consumer Detected" in nats-server.log, and what nats-py reports through
    compose.connect's error callback (messages dropped as a slow consumer, disconnects, timeouts).
(3) as_of latency at that size: a Projector serving queries on the full replay's generation (if that
    one is not whole: the DuckDB-only rows with the vectors-only index, said so in the output; its own
    embedding cache, empty: every query text is embedded cold). Through QueryClient.ask (NATS
    request/reply): GetMemory(memory_id=random memory, as_of=AsOf(seq=random sequence while it
    existed)), and SearchMemories(mode keyword/semantic/hybrid, namespace=random of 4, limit 10,
    as_of=AsOf(seq=random past sequence)), `queries` each (300 full, 100 quick), interleaved in a
    rotating order after a warm-up. Target p95 < 50 ms each. Beside them: the same without as_of
    (a third as many) and a core NATS request/reply echo.

Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
A failed verification, a failed query or an embedding during a replay is printed and the process
exits 1 after the JSON line.
"""
