"""The reference knowledge-graph server's memory file (@modelcontextprotocol/server-memory's `memory.jsonl`, one
JSON object a line): parsed and checked line by line (every bad line named by its number, before anything is
written), lines naming one entity or relation again merged, and the lines an export writes. No I/O but the
file's own; mneme/app/graph_import.py writes and reads the memory."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mneme.app.preflight import Refused
from mneme.domain.graph import MAX_NAME_CHARS, distinct, name_key
from mneme.errors import InvalidInput
from services.gateway.graph_commands import (
    entity_name,
    observation,
    relation_type,
)

SHOWN = 20  # bad lines (and notes) written out at most; the rest counted


# ---- the file ---------------------------------------------------------------------------------------------


@dataclass
class FileEntity:
    name: str
    entity_type: str
    observations: list[str]
    line: int


@dataclass(frozen=True)
class FileRelation:
    from_name: str
    to_name: str
    relation_type: str


@dataclass
class Parsed:
    """A file that passed every check: its entities (by name key, in file order), relations (each once), the
    relations' ends that no entity line names (by name key: the name the first relation gives it)."""

    entities: dict[str, FileEntity] = field(default_factory=dict)
    relations: dict[tuple[str, str, str], FileRelation] = field(default_factory=dict)
    lines: int = 0  # lines with an entity or a relation
    duplicates: int = 0  # of those, lines merged into an earlier one
    notes: list[str] = field(default_factory=list)

    def missing_ends(self) -> dict[str, str]:
        ends: dict[str, str] = {}
        for r in self.relations.values():
            for end in (r.from_name, r.to_name):
                key = name_key(end)
                if key not in self.entities:
                    ends.setdefault(key, end)
        return ends


class BadLines(Refused):
    """The file has lines that cannot be imported: (line number, why) each; nothing was written."""

    def __init__(self, path: Path, problems: list[tuple[int, str]]):
        self.problems = problems
        numbers = ", ".join(str(n) for n, _ in problems[:SHOWN]) + (" …" if len(problems) > SHOWN else "")
        super().__init__(
            f"import: {path}: {len(problems)} bad line(s) (lines {numbers}); nothing imported: fix them and import "
            "again"
        )


def _string(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if value is None:
        raise InvalidInput(key, "missing")
    if not isinstance(value, str):
        raise InvalidInput(key, f"must be a string, not {type(value).__name__}")
    return value


def _entity(item: dict[str, Any]) -> FileEntity:
    name = entity_name(_string(item, "name"), "name")
    kind = _string(item, "entityType")
    if len(kind) > MAX_NAME_CHARS:
        raise InvalidInput("entityType", f"at most {MAX_NAME_CHARS} characters ({len(kind)} given)")
    raw = item.get("observations", [])
    if not isinstance(raw, list):
        raise InvalidInput("observations", f"must be a list of strings, not {type(raw).__name__}")
    obs = []
    for j, o in enumerate(raw):
        if not isinstance(o, str):
            raise InvalidInput(f"observations[{j}]", f"must be a string, not {type(o).__name__}")
        obs.append(observation(o, f"observations[{j}]"))
    return FileEntity(name=name, entity_type=kind, observations=distinct(obs), line=0)


def _relation(item: dict[str, Any]) -> FileRelation:
    return FileRelation(
        from_name=entity_name(_string(item, "from"), "from"),
        to_name=entity_name(_string(item, "to"), "to"),
        relation_type=relation_type(_string(item, "relationType"), "relationType"),
    )


def parse(text: str, path: Path) -> Parsed:
    """Every line checked (blank lines are skipped, as the reference skips them); BadLines names each bad one."""
    out, problems = Parsed(), []
    # (split on "\n" only, as the reference does: a JSON string may hold U+2028, which splitlines() would cut)
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            problems.append((n, f"not JSON ({exc})"))
            continue
        if not isinstance(item, dict):
            problems.append((n, f"not a JSON object (a {type(item).__name__})"))
            continue
        kind = item.get("type")
        try:
            if kind == "entity":
                _merge_entity(out, _entity(item), n)
            elif kind == "relation":
                _merge_relation(out, _relation(item))
            else:
                shown = "no type" if kind is None else f"unknown type {json.dumps(kind, ensure_ascii=False)[:60]}"
                problems.append((n, f"{shown} (entity or relation)"))
                continue
        except InvalidInput as exc:
            problems.append((n, f"{kind}: {exc.message}"))
            continue
        out.lines += 1
    if problems:
        raise BadLines(path, problems)
    return out


def _merge_entity(out: Parsed, e: FileEntity, n: int) -> None:
    key = name_key(e.name)
    first = out.entities.get(key)
    if first is None:
        e.line = n
        out.entities[key] = e
        return
    out.duplicates += 1
    first.observations = distinct([*first.observations, *e.observations])
    if e.entity_type != first.entity_type:
        out.notes.append(
            f"line {n}: {e.name!r} again as type {e.entity_type!r}: it keeps {first.entity_type!r} (line {first.line})"
        )


def _merge_relation(out: Parsed, r: FileRelation) -> None:
    key = (name_key(r.from_name), r.relation_type, name_key(r.to_name))
    if key in out.relations:
        out.duplicates += 1
    else:
        out.relations[key] = r


def read_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # (a byte order mark, if an editor wrote one, is not a line)
    except FileNotFoundError:
        raise Refused(f"import: {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise Refused(f"import: {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise Refused(f"import: {path}: {exc.strerror or exc}") from None


def entity_line(name: str, entity_type: str, observations: Sequence[str]) -> str:
    item = {"type": "entity", "name": name, "entityType": entity_type, "observations": list(observations)}
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))  # (as JSON.stringify writes it)


def relation_line(from_name: str, to_name: str, rel_type: str) -> str:
    item = {"type": "relation", "from": from_name, "to": to_name, "relationType": rel_type}
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def write_file(path: Path, lines: list[str]) -> None:
    """The lines, each ended by a newline, written whole or not at all (a temporary file moved over `path`)."""
    if not path.parent.is_dir():
        raise Refused(f"export: the directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise Refused(f"export: {path}: {exc.strerror or exc}") from None
