"""The vector port: one small interface over Qdrant, embedded (Qdrant Edge) or a server (qdrant-client).

A collection holds one point per memory version: a dense vector ("dense", cosine) of
its content, a sparse BM25 vector ("bm25", IDF applied by Qdrant at query time), and
a payload with every field a search filters on. Filters are written once as a tuple
of `Cond`s and translated per adapter; both adapters pass the same contract test.

The projector's position in the log is stored beside the points (a file next to an
Edge shard; a reserved point without vectors on a server), written after the
points it covers: replaying from an older position is harmless because every
write here is an idempotent upsert or payload set keyed by deterministic ids.

What the points hold is versioned (INDEX_VERSION): an Edge shard written under another
version is deleted when opened and folded again from the log; on a server the version is
part of the collection's name, so replicas of two versions never share a collection.

The port (its vocabulary and protocol) is services/projector/vector_port.py, the adapters
services/projector/edge_vector_index.py and client_vector_index.py; this module is where the rest of the
code finds all of them.
"""

from __future__ import annotations

from services.projector.client_vector_index import ClientIndex as ClientIndex
from services.projector.edge_vector_index import EdgeIndex as EdgeIndex
from services.projector.vector_port import DENSE as DENSE
from services.projector.vector_port import FLOAT_FIELDS as FLOAT_FIELDS
from services.projector.vector_port import INDEX_VERSION as INDEX_VERSION
from services.projector.vector_port import INT_FIELDS as INT_FIELDS
from services.projector.vector_port import KEYWORD_FIELDS as KEYWORD_FIELDS
from services.projector.vector_port import META_ID as META_ID
from services.projector.vector_port import OPEN as OPEN
from services.projector.vector_port import POINT_NS as POINT_NS
from services.projector.vector_port import SPARSE as SPARSE
from services.projector.vector_port import Cond as Cond
from services.projector.vector_port import Hit as Hit
from services.projector.vector_port import Search as Search
from services.projector.vector_port import VectorIndex as VectorIndex
from services.projector.vector_port import VPoint as VPoint
from services.projector.vector_port import Where as Where
from services.projector.vector_port import point_id as point_id
