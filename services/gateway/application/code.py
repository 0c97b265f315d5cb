"""The code index's use cases: index a project (scanned and chunked here, recorded in the log by the code
indexer, services/gateway/code_indexer.py) and delete one, after the gateway's mark, raising it to where the
run's last event landed."""

from __future__ import annotations

from pathlib import Path

from mneme.code import DryRun
from services.gateway.application.caller import Caller
from services.gateway.application.consistency import ReadYourWrites
from services.gateway.code_indexer import CodeIndexer, Run


class Code:
    def __init__(self, indexer: CodeIndexer, marks: ReadYourWrites) -> None:
        self.indexer, self.marks = indexer, marks

    def validate(self, path: str) -> Path:
        """The project directory `path` names, if indexing may read it (else InvalidPath)."""
        return self.indexer.validate(path)

    async def estimate(self, path: str) -> DryRun:
        return await self.indexer.estimate(path)

    async def index(self, call: Caller, path: str, *, wait: float) -> Run:
        """Index `path` in the call's namespace; wait up to `wait` seconds for the run to finish (it goes on in
        the background after that)."""
        ns, actor = call.namespace, call.principal.actor
        run = await self.indexer.index(ns, path, actor, call.request_id, await self.marks.mark(), wait=wait)
        self.marks.wrote(run.seq)
        return run

    async def delete(self, call: Caller, project_id: str, *, namespace: str | None = None) -> int:
        """Forget a project's chunks (one event); the log position it landed at."""
        ns = namespace or call.namespace
        seq = await self.indexer.delete(ns, project_id, call.principal.actor, call.request_id)
        self.marks.wrote(seq)
        return seq
