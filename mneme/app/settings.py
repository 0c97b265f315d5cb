"""Settings, one class per service (pydantic-settings, env prefix MNEME_…). Loaded in the CLI only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import AfterValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mneme import durability
from services.gateway.tool_groups import DEFAULT_TOOL_GROUPS, TOOL_GROUPS, ToolGroup  # (re-exported: the CLI)


def _file_name(value: str) -> str:
    if not value or value in (".", "..") or any(c in value for c in "/\\\x00") or len(value) > 255:
        raise ValueError("must be a file name in the data directory, without a directory part")
    return value


# a file's name inside the data directory: no directory part, so no setting writes outside it (`../x.duckdb`)
FileName = Annotated[str, AfterValidator(_file_name)]


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("mneme", appauthor=False))


class CoreSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MNEME_", extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir, description="Where embedded NATS, DuckDB files live.")
    nats_url: str | None = Field(None, description="NATS server(s), comma-separated; unset = embedded server.")
    stream_replicas: int = Field(1, ge=1, le=5, description="Replicas of the event stream (3 in a cluster).")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    log_format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object per line, with the request id that joins a call's lines."
    )
    nats_user: str | None = Field(None, description="NATS user (this service's role: mneme/nats_auth.py).")
    nats_password: SecretStr | None = Field(None, description="NATS password of nats_user.")
    nats_creds: Path | None = Field(None, description="A NATS .creds file (JWT and seed) instead of a password.")
    nats_tls_ca: Path | None = Field(None, description="CA file to verify the NATS servers' TLS certificates.")
    nats_tls_cert: Path | None = Field(None, description="Client certificate, when the servers require one.")
    nats_tls_key: Path | None = Field(None, description="The client certificate's key.")
    nats_sync: str = Field(
        "always",
        description="When every nats-server mneme starts fsyncs the log: 'always' (before acknowledging a write) "
        "or a duration such as 1s or 2m (faster; an OS crash or power cut can lose that much acknowledged data).",
    )

    @field_validator("nats_sync")
    @classmethod
    def _sync(cls, value: str) -> str:
        return durability.check(value)

    @field_validator("nats_url", "nats_user", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: Any) -> Any:  # MNEME_NATS_URL= (set, empty) is unset, as `status` took it
        return None if isinstance(value, str) and not value.strip() else value


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MNEME_GATEWAY_", extra="ignore")

    transport: Literal["stdio", "http"] = "stdio"
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    agent_id: str = Field("local-agent", description="Principal that stdio tool calls run as.")
    role: Literal["agent", "admin"] = "agent"
    organization: str | None = Field(None, description="The stdio principal's organization (its <org>/_system rules).")
    namespace: str = Field("default", description="Namespace used when a tool call names none.")
    namespaces: list[str] = Field(
        default_factory=lambda: ["*"], description="Namespace patterns the stdio principal may read and write."
    )
    read_only: list[str] = Field(default_factory=list, description="Namespace patterns it may only read.")
    principals_file: Path | None = Field(
        None, description="JSON file of bearer-token hashes to principals; required for HTTP beyond loopback."
    )
    http_anonymous: bool = Field(
        False,
        description="Serve HTTP without bearer tokens, as the stdio principal (local development, loopback only).",
    )
    require_context: bool = Field(
        False,
        description="Refuse calls without a context object (INVALID_CONTEXT); "
        "the native tools then declare it required (context=required).",
    )
    context: Literal["never", "optional", "required"] = Field(
        "never",
        description="The native tools' `context` argument (agent_id, organization_id, repository_id, "
        "intent, request_id): never offered (default: the principal comes from the token or these settings), "
        "optional, or required.",
    )
    tools: Annotated[list[ToolGroup] | None, NoDecode] = Field(
        None,
        description=f"The groups of native tools served (default: {', '.join(DEFAULT_TOOL_GROUPS)}; also: "
        f"{', '.join(g for g in TOOL_GROUPS if g not in DEFAULT_TOOL_GROUPS)}).",
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> Any:  # MNEME_GATEWAY_TOOLS=core,time as well as a JSON list
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [g.strip() for g in value.split(",") if g.strip()]
        return value

    trim_for_agents: bool = Field(
        False, description="Send agents (not admins) no log positions, request ids or access statistics."
    )
    consistency: Literal["gateway", "linearizable"] = Field(
        "gateway",
        description="gateway: every read waits for every write made through this gateway (read-your-writes); "
        "linearizable: every read waits for the head of the log (one extra stream-info round trip).",
    )
    publish_timeout: float = Field(3.0, gt=0, description="Seconds to wait for JetStream to confirm a write.")
    query_timeout: float = Field(6.0, gt=0, description="Seconds to wait for a projector's answer.")
    model_wait: float = Field(
        10.0,
        ge=0,
        description="Seconds a search by meaning waits for the embedding model while it loads (after a start) "
        "before it answers EMBEDDING_MODEL_LOADING with a retry hint; 0 answers at once.",
    )
    max_content_chars: int = Field(65_536, ge=1, le=1_048_576)
    rate_limit: float = Field(
        2000.0, ge=0, description="Tool calls per second per principal; more are refused with RATE_LIMIT (0: no limit)."
    )
    rate_burst: int = Field(4000, ge=1, description="Calls a principal may make at once after being idle.")
    max_in_flight: int = Field(
        512, ge=0, description="Tool calls per principal running at once; more are refused with RATE_LIMIT (0: no cap)."
    )
    index_backlog_max: int = Field(
        16,
        ge=0,
        description="mneme serve: a write that brings a text to embed waits while the vector index has more than "
        "this many texts pending, so the index keeps up with the writes (0: never wait).",
    )
    index_backlog_wait: float = Field(
        2.0, ge=0, description="The longest such a write waits before it is appended anyway (seconds)."
    )
    profile: str = Field("native", description="Tool surface over stdio: native, or a seed contract's profile.")
    code_roots: Annotated[list[Path] | None, NoDecode] = Field(
        None,
        description="Directories index_project may index (comma-separated; default: any the gateway can read).",
    )

    @field_validator("code_roots", mode="before")
    @classmethod
    def _roots(cls, value: Any) -> Any:  # MNEME_GATEWAY_CODE_ROOTS=/src,/work as well as a JSON list
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else [p.strip() for p in text.split(",") if p.strip()]
        return value

    stores: dict[str, str] = Field(
        default_factory=dict, description="Store registry for the cortex profile: store name -> namespace (JSON)."
    )


class ProjectorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MNEME_PROJECTOR_", extra="ignore")

    batch_max: int = Field(5000, ge=1, description="Most events folded in one DuckDB transaction.")
    catch_up_batch_max: int = Field(
        20000,
        ge=1,
        description="Most events in one DuckDB transaction while the rows catch up on a backlog (a replay, a new "
        "replica, a restart behind the log): fewer, larger commits cost less per event.",
    )
    wait_timeout: float = Field(5.0, gt=0, description="Seconds a query waits for its min_seq before PROJECTION_LAG.")
    catch_up_stall_s: float = Field(
        120.0, gt=0, description="Seconds a replay or rebuild may fold nothing before it fails, saying why."
    )
    linger: float = Field(0.1, ge=0, le=10, description="Seconds staged events may wait before a DuckDB commit.")
    access_linger: float = Field(
        1.0,
        ge=0,
        le=60,
        description="Seconds staged read records may wait before their access statistics are committed "
        "(a query that waits for them commits at once).",
    )
    db_name: FileName = Field("projector.duckdb", description="The DuckDB file's name in the data directory.")
    vectors: Literal["edge", "qdrant", "off"] = Field(
        "edge",
        description="edge: Qdrant Edge in-process under the data directory; qdrant: a Qdrant server at "
        "qdrant_url; off: no vector index (search tools answer SEARCH_UNAVAILABLE).",
    )
    qdrant_url: str | None = Field(None, description="Qdrant server URL (vectors=qdrant).")
    qdrant_api_key: str | None = None
    qdrant_collection: str = Field("mneme", description="Collection prefix on a Qdrant server; the model is appended.")
    embedding_model: str = Field(
        "paraphrase-minilm-l3", description="Embedding model (see docs/decisions/0011-embedding-model.md)."
    )
    embedding_threads: int | None = Field(None, ge=1, le=64, description="onnxruntime threads; unset = up to 2.")
    embedding_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Nice value of the embedding threads (Linux): tool calls first, embedding on the cores they "
        "leave (in mneme serve writes are paced by the index, so it keeps up either way); 0: share equally.",
    )
    embedding_cache: str = Field("embeddings.sqlite", description="Embedding cache file under the data directory.")
    vector_batch_max: int = Field(2000, ge=1, description="Most events folded into the vector index per commit.")
    snapshot_every: int = Field(
        0,
        ge=0,
        description="Write a snapshot of the read models every this many events "
        "(0: only on `mneme snapshot`); a replay starts from the newest one.",
    )
    snapshot_dir: Path | None = Field(
        None,
        description="Where snapshots are written and read (default <data dir>/snapshots): a directory the "
        "replicas share lets a new replica start from another's snapshot instead of the whole log.",
    )


class AuditorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MNEME_AUDITOR_", extra="ignore")

    batch_max: int = Field(5000, ge=1)
    linger: float = Field(0.1, ge=0, le=60, description="Seconds staged records may wait before a commit.")
    access_linger: float = Field(
        0.1,
        ge=0,
        le=60,
        description="The same for read records (the auditor follows the access stream itself, in `mneme auditor` "
        "and in `mneme serve`; an audit query commits what it waits for at once).",
    )
    db_name: FileName = Field("audit.duckdb", description="The audit trail's DuckDB file's name in the data directory.")
