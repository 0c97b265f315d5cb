"""The memories read model's shape in DuckDB: the tables (with the knowledge graph's, from
services/projector/graph_states.py), the column lists a state and a version are read and written in, the
projection version a file was written under, and the canonical dump a rebuild from the log must reproduce.
"""

from __future__ import annotations

from services.projector.graph_states import GRAPH_CANONICAL, GRAPH_SCHEMA, GRAPH_TABLES

CHECKPOINT = "memories"

SCHEMA = (
    """
SET TimeZone = 'UTC';
CREATE TABLE IF NOT EXISTS memories (
    id VARCHAR PRIMARY KEY, namespace VARCHAR NOT NULL, store VARCHAR, path VARCHAR,
    content VARCHAR NOT NULL, kind VARCHAR NOT NULL, category VARCHAR, subject VARCHAR,
    tags VARCHAR[] NOT NULL, importance DOUBLE NOT NULL, confidence DOUBLE NOT NULL,
    citations VARCHAR[] NOT NULL, metadata VARCHAR NOT NULL, status VARCHAR NOT NULL,
    version INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL,
    created_by VARCHAR NOT NULL, updated_by VARCHAR NOT NULL, expires_at TIMESTAMPTZ,
    valid_from TIMESTAMPTZ, valid_until TIMESTAMPTZ, last_seq BIGINT NOT NULL,
    verification VARCHAR NOT NULL, locked BOOLEAN NOT NULL, status_reason VARCHAR, lock_reason VARCHAR,
    invalid_reason VARCHAR, superseded_by VARCHAR
);
CREATE TABLE IF NOT EXISTS memory_versions (
    id VARCHAR NOT NULL, version INTEGER NOT NULL, seq BIGINT NOT NULL, recorded_at TIMESTAMPTZ NOT NULL,
    event_type VARCHAR NOT NULL, request_id VARCHAR NOT NULL, agent_id VARCHAR NOT NULL, deleted BOOLEAN NOT NULL,
    namespace VARCHAR NOT NULL, store VARCHAR, path VARCHAR, content VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    category VARCHAR, subject VARCHAR, tags VARCHAR[] NOT NULL, importance DOUBLE NOT NULL,
    confidence DOUBLE NOT NULL, citations VARCHAR[] NOT NULL, metadata VARCHAR NOT NULL, status VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, created_by VARCHAR NOT NULL,
    updated_by VARCHAR NOT NULL, expires_at TIMESTAMPTZ, valid_from TIMESTAMPTZ, valid_until TIMESTAMPTZ,
    verification VARCHAR NOT NULL, locked BOOLEAN NOT NULL, status_reason VARCHAR, lock_reason VARCHAR,
    invalid_reason VARCHAR, superseded_by VARCHAR,
    seq_to BIGINT,  -- the sequence that replaced this version (NULL: still current);
                    -- its record interval is [seq, seq_to)
    PRIMARY KEY (id, version)
);
CREATE TABLE IF NOT EXISTS stores (
    namespace VARCHAR NOT NULL, name VARCHAR NOT NULL, created_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS categories (
    namespace VARCHAR NOT NULL, store VARCHAR NOT NULL, path VARCHAR NOT NULL, created_seq BIGINT NOT NULL,
    PRIMARY KEY (namespace, store, path)
);
CREATE TABLE IF NOT EXISTS access_stats (
    id VARCHAR PRIMARY KEY, accessed_at TIMESTAMPTZ, access_count BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (name VARCHAR PRIMARY KEY, seq BIGINT NOT NULL, mark VARCHAR);
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE INDEX IF NOT EXISTS memories_ns_path ON memories (namespace, store, path);
CREATE INDEX IF NOT EXISTS memory_versions_id ON memory_versions (id);
"""
    + GRAPH_SCHEMA
)

STATE_COLUMNS = (
    "id, namespace, store, path, content, kind, category, subject, tags, importance, confidence, citations, "
    "metadata, status, version, created_at, updated_at, created_by, updated_by, expires_at, valid_from, "
    "valid_until, last_seq, verification, locked, status_reason, lock_reason, invalid_reason, superseded_by"
)
N_STATE = 29
# the same columns read from memory_versions: a memory as it stood at one version
VERSION_STATE_COLUMNS = STATE_COLUMNS.replace("last_seq", "seq AS last_seq")

# The shape of the tables. A file written under another version is dropped and folded again
# from the log when opened: a projection is always rebuildable (invariant 1).
PROJECTION_VERSION = 6
TABLES = ("memories", "memory_versions", "stores", "categories", "access_stats", "checkpoints", "meta", *GRAPH_TABLES)

# Canonical dump: every table, every column, in a fixed order (the rebuild-equals-live proof).
VERSION_COLUMNS = (
    "id, version, seq, recorded_at, event_type, request_id, agent_id, deleted, namespace, store, path, content, "
    "kind, category, subject, tags, importance, confidence, citations, metadata, status, created_at, updated_at, "
    "created_by, updated_by, expires_at, valid_from, valid_until, verification, locked, status_reason, lock_reason, "
    "invalid_reason, superseded_by, seq_to"
)

CANONICAL_TABLES = {  # table -> (order, rows): what a rebuild from the event log must reproduce
    "memories": ("id", "TRUE"),
    "memory_versions": ("id, version", "TRUE"),
    "stores": ("namespace, name", "TRUE"),
    "categories": ("namespace, store, path", "TRUE"),
    "checkpoints": ("name", f"name = '{CHECKPOINT}'"),  # (name and seq: the mark is the log's, not a fold's)
    **GRAPH_CANONICAL,
}

CANONICAL_SOURCE = {"checkpoints": "(SELECT name, seq FROM checkpoints)"}

MEMORY_COLUMNS = [c.strip() for c in STATE_COLUMNS.split(",")]
VERSION_COLUMN_LIST = [c.strip() for c in VERSION_COLUMNS.split(",")]
