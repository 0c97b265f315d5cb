"""Generations of read models: which one serves, what it was built with, and how a new one takes over.

A data directory serves one generation of read models (the DuckDB file and the vector shard): the
directory `projections/CURRENT` names (written by `mneme replay`), else the data directory itself.
Each generation directory carries `generation.json`: the settings it was built with (embedding model,
`upto`, projection version, vector backend) and when it started. A build happens in a directory of its
own and takes over in one of two ways: `promote` (a new generation and the CURRENT pointer: `mneme
replay`, blue/green beside a live projector) or `install` (its files moved over the serving ones: `mneme
rebuild` and `mneme projector --rebuild`, with nothing serving them meanwhile).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mneme.app.settings import CoreSettings, ProjectorSettings

log = logging.getLogger("mneme")

CURRENT = "CURRENT"
BUILDING = "building"
META = "generation.json"


def projections_root(core: CoreSettings) -> Path:
    return core.data_dir / "projections"


def projection_dir(core: CoreSettings) -> Path:
    """Where the serving generation's read models live: the one `projections/CURRENT` names (after a
    `mneme replay`), else the data directory itself."""
    ptr = projections_root(core) / CURRENT
    if ptr.exists():
        name = ptr.read_text().strip()
        if name and (projections_root(core) / name).is_dir():
            return projections_root(core) / name
    return core.data_dir


def set_current(core: CoreSettings, gen_dir: Path) -> None:
    """Point `projections/CURRENT` at `gen_dir`, atomically (a crash leaves the old or the new pointer)."""
    root = projections_root(core)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{CURRENT}.tmp"
    tmp.write_text(gen_dir.name + "\n")
    os.replace(tmp, root / CURRENT)


def read_meta(gen_dir: Path) -> dict[str, Any]:
    """A generation's recorded settings ({} for the data directory's own read models or a damaged file)."""
    path = gen_dir / META
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def write_meta(gen_dir: Path, settings: dict[str, Any]) -> None:
    (gen_dir / META).write_text(json.dumps({**settings, "started": datetime.now(UTC).isoformat()}))


def with_model_of(gen_dir: Path, ps: ProjectorSettings) -> ProjectorSettings:
    """`ps` with the embedding model `gen_dir` was built with (after `mneme replay --model M`, M)."""
    model = read_meta(gen_dir).get("model")
    if model and model != ps.embedding_model:
        return ps.model_copy(update={"embedding_model": model})
    return ps


def serving_settings(core: CoreSettings, ps: ProjectorSettings) -> ProjectorSettings:
    """The settings the serving generation was built with: after `mneme replay --model M`, its model."""
    served = with_model_of(projection_dir(core), ps)
    if served is not ps:
        log.info("the serving generation was embedded with %s: using it (not %s)", served.embedding_model,
                 ps.embedding_model)  # fmt: skip
    return served


def new_generation(core: CoreSettings) -> Path:
    """A fresh generation directory's path (not created)."""
    return projections_root(core) / f"gen-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


def promote(core: CoreSettings, built: Path) -> Path:
    """Make a finished build the serving generation: rename it and point CURRENT at it."""
    final = new_generation(core)
    built.rename(final)
    set_current(core, final)
    return final


def files_of(ps: ProjectorSettings) -> list[str]:
    """The names of a generation's read-model files (the DuckDB file, its WAL, the vector shard)."""
    names = [ps.db_name, f"{ps.db_name}.wal"]
    if ps.vectors == "edge":
        names += [f"vectors-{ps.embedding_model}", f"vectors-{ps.embedding_model}.checkpoint.json"]
    return names


def install(built: Path, serving: Path, ps: ProjectorSettings) -> list[str]:
    """Move a finished build's read-model files over the serving ones (nothing may hold them). Each file is
    replaced by a rename; files of the old generation the build has no counterpart for are removed."""
    installed = []
    for name in files_of(ps):
        src, dst = built / name, serving / name
        if dst.is_dir():
            shutil.rmtree(dst)
        elif dst.exists():
            dst.unlink()
        if src.exists():
            os.replace(src, dst)
            installed.append(name)
    return installed


def discard(out: Path, root: Path) -> None:
    """Remove a failed build (and `projections/` itself if nothing else is in it)."""
    shutil.rmtree(out, ignore_errors=True)
    if out.parent == root:
        with contextlib.suppress(OSError):
            root.rmdir()


def remove_generation(core: CoreSettings, gen_dir: Path, ps: ProjectorSettings) -> list[str]:
    """Delete a swapped-out generation: a directory under projections/, or the read models at the root."""
    if gen_dir == core.data_dir:
        gone = []
        for p in [core.data_dir / ps.db_name, core.data_dir / f"{ps.db_name}.wal", *core.data_dir.glob("vectors-*")]:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
            else:
                continue
            gone.append(p.name)
        return gone
    shutil.rmtree(gen_dir, ignore_errors=True)
    return [gen_dir.name]
