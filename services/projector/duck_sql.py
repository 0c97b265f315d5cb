"""DuckDB helpers the projector's views share (the memories', the graph's and the code index's): a cursor per
reader thread, the row of a query that always answers one, bulk inserts as columns, closing the record
intervals of committed version rows, and a batch of keys as the columns `unnest(?)` takes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import duckdb
import numpy as np

from mneme.duck import first_row

SMALL_BATCH = 64  # rows below which insert_rows appends instead of scanning columns


def thread_cursor(con: duckdb.DuckDBPyConnection, local: threading.local) -> duckdb.DuckDBPyConnection:
    """A cursor of `con` for the calling thread (made on its first read, in UTC): readers run beside the
    writer (MVCC)."""
    cur: duckdb.DuckDBPyConnection | None = getattr(local, "cur", None)
    if cur is None:
        cur = con.cursor()
        cur.execute("SET TimeZone = 'UTC'")
        local.cur = cur
    return cur


def one_row(cur: duckdb.DuckDBPyConnection, sql: str, args: object = None) -> tuple[Any, ...]:
    """The row of a query that always answers one: an aggregate without GROUP BY, scalar subqueries."""
    row = first_row(cur.execute(sql, args))
    assert row is not None  # such a query answers one row
    return row


def insert_rows(cur: duckdb.DuckDBPyConnection, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """Insert rows as columns in one statement: DuckDB scans a registered dict of NumPy object arrays
    (`np.fromiter` keeps a list-valued cell one cell). A small batch (a live projector's commit of a few
    writes) goes through the appender instead: registering the columns costs ~1 ms a statement, more than
    the appender spends on a few rows. `columns` are in the table's order."""
    n = len(rows)
    if n < SMALL_BATCH:
        ap = cur.appender(table)
        ap.append_rows(rows)
        ap.flush()
        return
    cur.register(
        f"_{table}_batch",
        {c: np.fromiter(col, dtype=object, count=n) for c, col in zip(columns, zip(*rows, strict=True), strict=True)},
    )
    try:
        cols = ", ".join(columns)
        cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _{table}_batch")
    finally:
        cur.unregister(f"_{table}_batch")


def columns(rows: Iterable[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows as columns: the parameters of a statement that takes each column as `unnest(?)`."""
    return [list(c) for c in zip(*rows, strict=True)]


def close_versions(cur: duckdb.DuckDBPyConnection, table: str, closed: dict[tuple[str, int], int]) -> None:
    """Close committed version rows of `table` (an id, a version, a record interval [seq, seq_to)): (id,
    version) -> seq_to, the sequence that replaced it."""
    if closed:
        cur.execute(
            f"UPDATE {table} SET seq_to = c.s FROM (SELECT unnest(?) AS i, unnest(?) AS v, unnest(?) AS s) c "
            f"WHERE {table}.id = c.i AND {table}.version = c.v",
            columns((i, v, s) for (i, v), s in closed.items()),
        )
