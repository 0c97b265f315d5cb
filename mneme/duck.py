"""Small DuckDB helpers every read model and the trail share."""

from __future__ import annotations

import logging

import duckdb

log = logging.getLogger("mneme.duckdb")


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back after a failed transaction without hiding why it failed: a COMMIT that fails writing its WAL
    (the disk is full) has already ended the transaction, and ROLLBACK then raises "no transaction is
    active", which would replace the error that matters."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error as exc:
        log.debug("rollback after a failed transaction: %s", exc)
