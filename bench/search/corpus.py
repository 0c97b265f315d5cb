"""bench.search's corpus and queries: varied, realistic-ish memories and natural-language queries from templates x
vocabularies (fixed seeds), and the run's sizes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas.queries import SearchMemories, SearchMode

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
