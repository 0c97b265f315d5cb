"""bench.graph — graph-aware recall at 10,000 and 100,000 relations, and the `server-memory` profile under the
reference knowledge-graph server's own workload over stdio.

    python -m bench.graph            # 20,000 entities, 10,000 memories; 10,000 entities over stdio
    python -m bench.graph --quick    # 5,000 entities, 2,000 memories; 2,000 entities over stdio
    options: --keep, --queries N, --entities N, --memories N, --stdio-entities N, --only recall|stdio

(1) recall (bench/graph/recall.py): one embedded nats-server, a projector with vectors (the bundled model);
    entities, memories naming two of them each, then 10,000 relations, published straight to the log and
    folded; SearchMemories(mode="hybrid", fusion="zscore", weights 0.40/0.15 and graph 0.45, memory-mcp's
    defaults) through QueryClient, each query also asked with graph weight 0 (plain hybrid: the floor) in the
    same rounds. Then 90,000 more relations, folded, and the same rounds again. Target: p95 with the graph
    signal < 50 ms at both sizes. Also: the first graph query after a fold (the subgraph is rebuilt; the
    cache is keyed by projection position), the subgraph's size, and the fold rate of relation events.
(2) server-memory over stdio (bench/graph/server_memory.py): create_entities one per call, add_observations,
    search_nodes, open_nodes: calls/s and p50 beside the no-op tool, block by block in the same run.

Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
"""
