"""The one runner every benchmark goes through: `python -m bench.NAME [--quick] [--keep] [options]`.

A benchmark declares a `Bench` (its name, its docstring, what --quick means, the options that override its
Config's sizes) and an async entry `amain(args)` that returns its figures, or (figures, problems).
`Bench.main` parses the flags, runs it (Ctrl-C and SIGTERM stop it cleanly: children stopped, the temporary
directory removed, exit 130), adds the wall time where asked, prints the figures as ONE JSON object on the
LAST line of stdout, then logs each problem to stderr and exits 1 if there was one.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench.common import emit_json, log, rnd

C = TypeVar("C")
Outcome = dict[str, Any] | tuple[dict[str, Any], list[str]]
Entry = Callable[[argparse.Namespace], Coroutine[Any, Any, Outcome]]


@dataclass(frozen=True)
class Size:
    """An option that overrides one field of a benchmark's Config (`--flag N`)."""

    flag: str
    type: Callable[[str], Any]
    help: str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Bench:
    name: str  # python -m bench.NAME
    doc: str | None = None  # the module's docstring: its first paragraph is the description
    quick: str = "short run"  # what --quick means
    keep: str | None = "keep the temporary directory"  # None: no --keep
    sizes: Mapping[str, Size] = field(default_factory=dict)  # Config field -> the option that overrides it
    wall: bool = False  # add `wall_seconds` (the whole run) to the figures
    problems_key: bool = False  # also put the problems in the figures, as `problems`

    def parser(self) -> argparse.ArgumentParser:
        """--quick, --keep and the size options; a benchmark adds its own after these."""
        ap = argparse.ArgumentParser(prog=f"python -m bench.{self.name}", description=(self.doc or "").split("\n\n")[0])
        ap.add_argument("--quick", action="store_true", help=self.quick)
        if self.keep is not None:
            ap.add_argument("--keep", action="store_true", help=self.keep)
        for size in self.sizes.values():
            ap.add_argument(size.flag, type=size.type, help=size.help)
        return ap

    def config(self, args: argparse.Namespace, quick: Callable[[], C], full: Callable[[], C]) -> C:
        """The quick or the full Config, with the sizes given on the command line."""
        cfg = quick() if args.quick else full()
        over = {k: getattr(args, s.dest) for k, s in self.sizes.items() if getattr(args, s.dest) is not None}
        return dataclasses.replace(cfg, **over) if over else cfg  # type: ignore[type-var]

    def run(self, amain: Entry, args: argparse.Namespace) -> None:
        """Run `amain(args)`, then the JSON line; exit 130 when interrupted, 1 when there were problems."""
        t0 = time.perf_counter()
        try:
            got = asyncio.run(amain(args))
        except (KeyboardInterrupt, asyncio.CancelledError):
            kept = getattr(args, "keep", False)
            log("interrupted: children stopped" + ("" if kept else ", temporary directory removed"))
            sys.exit(130)
        result, problems = got if isinstance(got, tuple) else (got, [])
        if self.wall:
            result["wall_seconds"] = rnd(time.perf_counter() - t0, 1)
        if self.problems_key:
            result["problems"] = problems
        emit_json(result)
        for line in problems:
            log(f"FAILED: {line}")
        if problems:
            sys.exit(1)

    def main(self, amain: Entry, argv: list[str] | None = None) -> None:
        """The whole entry point of a benchmark without options of its own."""
        self.run(amain, self.parser().parse_args(argv))


def mode_of(args: argparse.Namespace) -> str:
    return "quick" if args.quick else "full"
