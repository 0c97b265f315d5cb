"""bench.code — the code index end to end: a real code base (the standard library's Lib folder) indexed over
stdio, against the embedding model's raw batch rate on the same chunk texts, and search_code latency.

    python -m bench.code            # the whole Lib (tests, idlelib, tkinter, ... left out: about 560 files)
    python -m bench.code --quick    # a seeded sample of 100 files of it (300 take 5-6 minutes here)
    options: --files N (a sample of N files), --queries N, --raw N (chunk texts per floor run), --keep

One `mneme serve --profile memory-mcp --data-dir <tmp>` under the mcp client (stdio; its own embedded
nats-server, projector and model), the no-op MCP server (bench/noop_server.py) beside it.

(0) the code base: .py files of this interpreter's standard library (sysconfig's `stdlib`), copied into the
    run directory (a sample of --files when given; quick: 300), so the indexed tree is exactly those files.
    The same files are chunked in this process by the product's own Chunker (mneme.code), giving the chunk
    texts (`header\\ncode`, what CodeView embeds) for the floor and the search queries.
(1) floor: the model's raw batch rate. `OnnxEmbedder.embed` (the projector's model and thread settings) on
    a seeded sample of those chunk texts, before the indexing and again after it; the mean of the two.
(2) indexing: the server's model loaded first (a search_code on the empty index waits for it); then the
    clock runs from `index_project` until `get_index_status` says completed (every chunk has its vector):
    files/s and chunks/s end to end; chunks/s over the raw rate is the headline (target >= 0.70).
(3) search_code over stdio: natural-language queries made from the names of functions and classes in
    the chunks ("function that parse header words"), limit 10, each text distinct; p50/p95 (target p95
    < 50 ms), and how often the named definition's file is among the 10 (a sanity figure, not a target).
    The no-op tool's p50 in the same run is the stdio floor.

Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
"""
