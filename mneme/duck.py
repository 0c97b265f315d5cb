"""Small DuckDB helpers every read model and the trail share."""

from __future__ import annotations

import logging
from typing import Any

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


def first_row(cur: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row of the query just run on `cur`, with the result read to its end. `fetchone()` leaves the
    result open, and with it the cursor's transaction until that cursor runs its next statement: a reader
    cursor of a worker thread that then sits idle keeps it open for as long as it sits, and meanwhile DuckDB
    can neither checkpoint its WAL nor free the versions written since (in DuckDB alone, a reader left so
    while 10-row transactions committed: +52 MB of native heap after 20,000 and rising, against a level
    ~27 MB with the result read). Only for queries of at most a few rows (a key lookup, an aggregate)."""
    rows = cur.fetchall()
    return rows[0] if rows else None
