"""The cortex profile's arguments and results: the contract's shapes (mcp-memory-tools-spec.md), as typed models."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

StoreArg = Annotated[str, Field(min_length=1, description="Store name (required): a store registered with the server.")]
PathArg = Annotated[
    str, Field(min_length=1, description="Memory path in category/slug format, e.g. 'project/decisions/db'.")
]
IncludeExpired = Annotated[bool, Field(description="Include expired memories.")]
Expiry = Annotated[
    str | None, Field(description="Expiration date (ISO 8601), e.g. '2026-12-31' or '2026-12-31T18:00:00Z'.")
]
Citation = Annotated[str, Field(min_length=1)]


class Written(BaseModel):
    """A write's receipt: the contract's message (also the text of the result) and where it happened."""

    message: str = Field(
        description="'Memory created at <path>', 'Memory updated at <path>', 'Memory removed at <path>'."
    )
    store: str
    path: str


class Moved(BaseModel):
    message: str = Field(description="'Memory moved from <from_path> to <to_path>'.")
    store: str
    from_path: str
    to_path: str


def receipt(model: Written | Moved) -> CallToolResult:
    """The result as the contract gives it (a text message), with the same receipt as structured content."""
    return CallToolResult(
        content=[TextContent(type="text", text=model.message)], structured_content=model.model_dump(mode="json")
    )


class MemoryMetadata(BaseModel):
    created_at: datetime
    updated_at: datetime
    tags: list[str]
    source: str = Field(description="Where the memory came from: 'mcp'.")
    expires_at: datetime | None = None
    citations: list[str] = Field(description="Sources (file paths, URLs, document ids); [] when none.")


class MemoryDocument(BaseModel):
    path: str
    content: str
    metadata: MemoryMetadata


class ListedMemory(BaseModel):
    path: str
    token_estimate: int = Field(description="About 4 characters per token.")
    expires_at: datetime | None = None
    is_expired: bool
    updated_at: datetime | None = Field(description="When the memory last changed (ISO 8601), from the index.")


class Subcategory(BaseModel):
    path: str
    memory_count: int = Field(description="Memories under it, its own subcategories included.")


class MemoryListing(BaseModel):
    category: str = Field(description="The category listed, or 'all' for the store's root.")
    count: int
    memories: list[ListedMemory] = Field(description="The memories directly in the category, by path.")
    subcategories: list[Subcategory] = Field(description="Its direct subcategories, by path.")


class PrunedMemory(BaseModel):
    path: str
    expires_at: datetime


class PruneOutcome(BaseModel):
    pruned_count: int
    pruned: list[PrunedMemory]


class ReindexOutcome(BaseModel):
    store: str
    path: str = Field(description="Where the store lives: '<namespace>/<store>'.")
    categories: int = Field(description="Categories in the store's index after the rebuild.")
    added: int = Field(description="Index rows the rebuild wrote (missing or wrong).")
    removed: int = Field(description="Index rows the rebuild dropped (no memory justified them).")
    memories: int = Field(description="Memories in the store.")
    warnings: list[str] = Field(description="Problems met while reindexing ([] when none).")


class RecentMemory(BaseModel):
    path: str
    content: str = Field(description="The full content (raw markdown).")
    updated_at: datetime | None
    token_estimate: int = Field(description="About 4 characters per token.")
    tags: list[str]


class RecentMemories(BaseModel):
    category: str = Field(description="The category path, or 'all'.")
    count: int
    memories: list[RecentMemory] = Field(description="Newest first.")
