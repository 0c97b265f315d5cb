"""The progress of a fold (`mneme replay`, `mneme rebuild`) on stderr.

On a terminal: one bar, redrawn in place (`\\r`), ended by a newline when the fold is done. Anywhere else (a
file, a pipe, a CI log, a service's journal), where `\\r` would make the whole fold one long line: one line per
step, at most one every `every` seconds (the first at once), and the final line, each a line of its own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

EVERY_S = 5.0
WIDTH = 30


class Progress:
    """A `progress(done, total, seconds)` callback that writes to `stream` (default: stderr at each call)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        every: float = EVERY_S,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._tty = tty
        self.every = every
        self.clock = clock
        self._final: tuple[int, int] | None = None  # the last final line written (written once)
        self._written_at: float | None = None  # when the last line was written (lines mode)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def is_tty(self) -> bool:
        if self._tty is not None:
            return self._tty
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):  # (a closed or unusual stream: lines)
            return False

    def __call__(self, done: int, total: int, seconds: float) -> None:
        final = done >= total
        if final and self._final == (done, total):
            return  # the final line is written once
        rate = done / seconds if seconds > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        out = self.stream
        if self.is_tty():
            filled = int(WIDTH * done / total) if total else WIDTH
            bar = f"[{'#' * filled}{'.' * (WIDTH - filled)}]"
            out.write(f"\r{bar} {done}/{total} events  {rate:,.0f}/s  ETA {eta:,.0f}s" + ("\n" if final else ""))
        else:
            now = self.clock()
            if not final and self._written_at is not None and now - self._written_at < self.every:
                return
            self._written_at = now
            pct = 100 * done // total if total else 100
            out.write(f"{done}/{total} events ({pct}%)  {rate:,.0f}/s  ETA {eta:,.0f}s\n")
        out.flush()
        if final:
            self._final = (done, total)
