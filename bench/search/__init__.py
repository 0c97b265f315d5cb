"""bench.search — search at 100,000 memories, and embedding throughput while the vectors catch up.

    python -m bench.search            # full run (6-8 minutes on 2 cores)
    python -m bench.search --quick    # short run (about 40 s idle, up to 90 s on a busy machine)
    options: --keep (keep the temporary directory: nats-server.log, the Edge shard, the cache),
             --target N, --other N, --queries N, --raw N (sizes), --optimize (diagnostic, slow at 100,000:
             EdgeShard.optimize() after the measured rounds, then the rounds again)
    the model and batch sizes are the projector's settings (MNEME_PROJECTOR_EMBEDDING_MODEL, ...)

One embedded nats-server on 127.0.0.1 (streams from ensure_streams), one temporary directory.

(0) the log: memory_created envelopes as the gateway writes them (id from the request id, event id
    from the message id, `Nats-Msg-Id` and expected-last-subject-sequence headers), pipelined:
    100,000 memories in the target namespace and 1,000 in each of nine others (quick: 10,000 and
    500), interleaved in one random order. The texts are sentences from templates x vocabularies
    (people, places, foods, drinks, tools, projects, teams, dates, hobbies), one to three
    sentences, every text distinct; kind, category, tags, subject and importance follow the
    template (kind="preference" is about 20%).
(1) floor: the model's raw batch throughput. `OnnxEmbedder.embed` (batch 64, the projector's own
    embedder instance) on a random sample of the same texts, before the catch-up and again after it.
(2) catch-up: a fresh projector (`Projector(vectors=VectorView)`: a fresh MemoriesView, a fresh Edge
    shard, a fresh embedding cache, so nothing is cached) started on the full log, with the model
    already loaded; timed from `start()` until the vector follower has committed the log head.
    Embedding throughput = texts the model embedded (`VectorView.embedded`) / seconds; target >= 80%
    of the raw rate (the mean of the two floor runs). The bench wraps the view's parts in timing
    proxies (stage, commit, cache, model, BM25, Edge upsert and checkpoint) and notes every commit, so
    the tables say where the catch-up time went and how fast the model ran inside it.
(3) latency: with the projector serving, SearchMemories through `QueryClient.ask` (NATS request ->
    the projector's queue subscription -> Searcher -> Edge -> reply), limit 10, each with a payload
    filter (a kind, a category or a tag, 15-25% of the namespace), for semantic, keyword and
    hybrid: natural-language queries from the same vocabularies (not stored texts), every text
    distinct, so each must be embedded ("cold"). Target p95 < 50 ms per mode (the seeds: < 200 ms).
    Floors, interleaved query by query with the measured series (modes in a rotating order): the
    same kind of queries through `Projector.run_query` in-process (no NATS, no thread hop); raw Edge
    queries (dense, BM25, both batched) with the same filter and a precomputed vector; one query
    embedding alone; a core NATS request/reply echo. Then the NATS queries again, and in-process,
    "warm" (the query's vector cached). Per series, the mean time in the model, Edge search, the
    cache and BM25 (timing proxies), and the rest.

Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
A failed query or a count that does not add up is printed and the process exits 1 after the JSON line.
"""
