"""bench.soak — a long mixed workload from concurrent MCP clients over streamable HTTP, checked for correctness.

    python -m bench.soak [--duration SECONDS] [--quick] [--clients N] [--seed S] [--cluster] [--keep]
                         [--steady N] [--reads-only] [--detail-every SECONDS] [--signal-marks] [--json-out FILE]

Against a real `mneme serve --transport http` (embedded NATS, DuckDB, Qdrant Edge and the model; a temporary
data directory, a free loopback port, every tool group served), or with --cluster against the local cluster
(mneme/app/cluster.py: 3 nats-server nodes, 2 gateways, 2 projector replicas, 1 auditor; each client pinned to one
gateway). N clients (default 8), each an mcp ClientSession over streamable HTTP (mcp.Client adds ~40 ms a call:
bench/cluster), run flat out for the duration after a warm-up, each with its own seeded random mix of:
adds (some at a store path), updates, occasional deletes, gets (checked against the last acknowledged
version), gets of deleted memories (MEMORY_NOT_FOUND expected), as_of gets at an earlier log position (checked
against the version acknowledged then), as_of lists and searches (by time and by sequence), keyword /
semantic / hybrid searches (keyword and hybrid searches for a memory's unique word must find it), lists,
histories (their length checked), graph calls (entities with observations on a shared pool, relations,
traversals, as_of reads, a temporary entity forgotten), code calls (code_search, code_status, and a
re-index of one changed file of a small generated project now and then), and memory_status.

Checks (exit status 1 when one fails):
- no lost acknowledged write: at the end every acknowledged memory is read back (memory_list, detail full,
  status any, paged) with its last acknowledged version and content; every deleted one is MEMORY_NOT_FOUND;
  memory_history has every acknowledged version; every acknowledged write's request_id is in the audit trail;
- no unexpected error: errors are counted by code; expected ones are those the workload provokes
  (MEMORY_NOT_FOUND for a deleted memory); retryable codes (CONFLICT, PROJECTION_LAG, UNAVAILABLE, INDEXING,
  EMBEDDING_MODEL_LOADING) are retried with the same arguments (writes carry a request_id) and counted,
  and a call still failing after its retries is unexpected; a transport failure or a timeout is unexpected;
- no stale read: gets, as_of gets and the searches for a unique word answer what was acknowledged;
- no dead letters (memory_status) and no ERROR or Traceback line in the server logs during the run.

Figures: calls/s and p50/p99 latency per kind; RSS (VmRSS from /proc) of every process (serve and its
nats-server child; in cluster mode every node and service) at the end of the warm-up, the middle and the end,
with the drift; projection lag (ProjectorStatus asked straight over NATS with min_seq 0, so it does not wait
for the gateway's high-water mark as memory_status does: lag events / seconds, vector lag) sampled every
period; probes every period: a write, then the time until its row is visible to a get and until its record is
in the audit trail (both asked over NATS with min_seq 0, polled every 10 ms); floors in the same run: a
no-op MCPServer tool over streamable HTTP from the same N clients, and a core NATS request/reply echo on the
server's NATS. Last line: one JSON object.

Memory (bench/soak/memory.py): beside RSS, every --detail-every seconds and at each mark, /proc/PID/smaps_rollup
of every process (resident, anonymous, file-backed) and the allocated size of each part of the data directories
(DuckDB files and WALs, the vector shard, the embedding cache, JetStream), with the memories and the log head,
and the growth per 1,000 events. --steady N: fill to N live memories, then pair each add with a delete of an
older one (probes' memories deleted once measured): a fixed live set, a growing history. --reads-only: after
the warm-up only calls that write nothing (growth then is per call). --signal-marks: SIGUSR1 at each mark
(for a diagnostic build that dumps its object counts; an unpatched mneme dies of it).

Not part of bench.all (too long). The default suite runs a 30-second variant (tests/test_soak.py).
"""
