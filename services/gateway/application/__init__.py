"""The gateway's application layer: one object per family of aggregates, one method per use case.

Tools and the seven profiles are thin adapters: they validate and shape arguments, call a use case here, and
shape its answer. What every use case needs is owned here and nowhere else:

- read-your-writes (consistency.py): every read waits for the gateway's mark, every write raises it;
- what a read records in the audit trail (reads.py): the answers asked through `Reads`, and only those;
- miss confirmation at the head of the log (reads.py), the write sides' retries and envelopes (the command
  services they wrap: services/gateway/commands.py, graph_commands.py, code_indexer.py);
- memories.py, graph.py, code.py, namespaces.py: the use cases of each family.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.gateway.application.audit import Audit
from services.gateway.application.code import Code
from services.gateway.application.consistency import Consistency, ReadYourWrites
from services.gateway.application.graph import Graph
from services.gateway.application.memories import Memories
from services.gateway.application.namespaces import Namespaces
from services.gateway.application.reads import Reads


@dataclass(frozen=True)
class Application:
    """The use cases a tool reaches (`call.app`)."""

    marks: ReadYourWrites
    reads: Reads
    memories: Memories
    graph: Graph
    code: Code
    namespaces: Namespaces
    audit: Audit


__all__ = ["Application", "Audit", "Code", "Consistency", "Graph", "Memories", "Namespaces", "ReadYourWrites", "Reads"]
