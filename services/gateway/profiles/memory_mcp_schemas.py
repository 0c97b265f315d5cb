"""The memory-mcp contract's tools as its server lists them (../shared/seeds/memory-mcp-contract.md): each tool's
description and input schema copied verbatim from the contract (its OpenAPI-style `nullable` included), for all
21 tools.

memory_mcp.py lists each tool with this input schema, the output schema of its result model and its annotations
(`Profile.listed`); the tool functions validate the same arguments (tests hold the two to each other).
"""

from __future__ import annotations

from typing import Any

CONTRACT: dict[str, dict[str, Any]] = {
    "store_memory": {
        "description": "Store a new memory with automatic embedding generation.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "content": {"description": "The content to store as a memory", "type": "string"},
                "memory_type": {
                    "description": "Type of memory: episodic, semantic, or procedural",
                    "type": "string",
                    "enum": ["episodic", "semantic", "procedural"],
                    "nullable": True,
                },
                "user_id": {
                    "description": "Optional user ID for multi-tenant isolation",
                    "type": "string",
                    "nullable": True,
                },
                "metadata": {"description": "Optional metadata as JSON object", "type": "object", "nullable": True},
            },
            "required": ["content"],
        },
    },
    "get_memory": {
        "description": "Get a memory by its ID.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"description": "The memory ID to retrieve", "type": "string"}},
            "required": ["id"],
        },
    },
    "update_memory": {
        "description": "Update an existing memory. Only provided fields will be updated.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"description": "The memory ID to update", "type": "string"},
                "content": {
                    "description": "New content (optional, re-embeds if changed)",
                    "type": "string",
                    "nullable": True,
                },
                "memory_type": {"description": "New memory type (optional)", "type": "string", "nullable": True},
                "metadata": {"description": "New metadata (optional)", "type": "object", "nullable": True},
            },
            "required": ["id"],
        },
    },
    "delete_memory": {
        "description": "Delete a memory by ID (hard delete).",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"description": "The memory ID to delete", "type": "string"}},
            "required": ["id"],
        },
    },
    "list_memories": {
        "description": "List memories with pagination, sorted by newest first.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "limit": {
                    "description": "Maximum number to return (default: 20, max: 100)",
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 20,
                },
                "offset": {
                    "description": "Offset for pagination (default: 0)",
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                },
            },
        },
    },
    "search": {
        "description": "Semantic vector search over memories using HNSW index.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"description": "The search query text (will be embedded)", "type": "string"},
                "limit": {
                    "description": "Maximum results (default: 10, max: 50)",
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "default": 10,
                },
            },
            "required": ["query"],
        },
    },
    "search_text": {
        "description": "Full-text keyword search using BM25 algorithm.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"description": "The keyword query for full-text search", "type": "string"},
                "limit": {
                    "description": "Maximum results (default: 10, max: 50)",
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "default": 10,
                },
            },
            "required": ["query"],
        },
    },
    "recall": {
        "description": (
            "Hybrid search combining vector similarity, BM25 keywords, and graph context (PPR). "
            "Can search memories, code, or both with Z-Score normalization."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"description": "Search query", "type": "string"},
                "limit": {"description": "Maximum results (default: 10, max: 50)", "type": "integer", "default": 10},
                "include_memories": {
                    "description": "Include memory results (default: true)",
                    "type": "boolean",
                    "default": True,
                },
                "include_code": {
                    "description": "Include code chunk results (default: false)",
                    "type": "boolean",
                    "default": False,
                },
                "project_id": {
                    "description": "Filter code results by project (optional, requires include_code=true)",
                    "type": "string",
                    "nullable": True,
                },
                "language": {
                    "description": "Filter code by language: rust, python, javascript, typescript, go (optional)",
                    "type": "string",
                    "nullable": True,
                },
                "vector_weight": {
                    "description": "Weight for vector similarity (default: 0.40)",
                    "type": "number",
                    "default": 0.4,
                },
                "bm25_weight": {"description": "Weight for BM25 (default: 0.15)", "type": "number", "default": 0.15},
                "ppr_weight": {
                    "description": "Weight for PPR graph ranking (default: 0.45)",
                    "type": "number",
                    "default": 0.45,
                },
            },
            "required": ["query"],
        },
    },
    "create_entity": {
        "description": "Create a knowledge graph entity.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"description": "Entity name", "type": "string"},
                "entity_type": {
                    "description": "Type: person, project, concept, file, etc.",
                    "type": "string",
                    "nullable": True,
                },
                "description": {"description": "Optional description", "type": "string", "nullable": True},
                "user_id": {"description": "Optional user ID for isolation", "type": "string", "nullable": True},
            },
            "required": ["name"],
        },
    },
    "create_relation": {
        "description": "Create a directed relation between two entities.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "from_entity": {"description": "Source entity ID", "type": "string"},
                "to_entity": {"description": "Target entity ID", "type": "string"},
                "relation_type": {"description": "Relation type: works_on, knows, uses, etc.", "type": "string"},
                "weight": {
                    "description": "Relation weight (0.0-1.0, default: 1.0)",
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "default": 1.0,
                },
            },
            "required": ["from_entity", "to_entity", "relation_type"],
        },
    },
    "get_related": {
        "description": "Get entities related to a given entity via graph traversal.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "entity_id": {"description": "Entity ID to start from", "type": "string"},
                "depth": {
                    "description": "Traversal depth (1-3, default: 1)",
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 3,
                    "default": 1,
                },
                "direction": {
                    "description": "Traversal direction",
                    "type": "string",
                    "enum": ["outgoing", "incoming", "both"],
                    "default": "outgoing",
                },
            },
            "required": ["entity_id"],
        },
    },
    "get_valid": {
        "description": "Get all currently valid memories.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "user_id": {"description": "Optional user ID filter", "type": "string", "nullable": True},
                "limit": {"description": "Maximum to return (default: 20, max: 100)", "type": "integer", "default": 20},
            },
        },
    },
    "get_valid_at": {
        "description": "Get memories valid at a specific point in time.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "timestamp": {"description": "Timestamp in ISO 8601 format", "type": "string", "format": "date-time"},
                "user_id": {"description": "Optional user ID filter", "type": "string", "nullable": True},
                "limit": {"description": "Maximum to return (default: 20, max: 100)", "type": "integer", "default": 20},
            },
            "required": ["timestamp"],
        },
    },
    "invalidate": {
        "description": "Invalidate (soft-delete) a memory. Sets valid_until to now.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"description": "Memory ID to invalidate", "type": "string"},
                "reason": {"description": "Optional reason for invalidation", "type": "string", "nullable": True},
                "superseded_by": {
                    "description": "Optional ID of memory that supersedes this one",
                    "type": "string",
                    "nullable": True,
                },
            },
            "required": ["id"],
        },
    },
    "get_status": {
        "description": "Get server status and health information.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    "reset_all_memory": {
        "description": "Delete ALL data (memories, entities, relations, code_chunks). Requires explicit confirmation.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "confirm": {"description": "Must be true to confirm deletion. Safety check.", "type": "boolean"}
            },
            "required": ["confirm"],
        },
    },
    "index_project": {
        "description": "Index a codebase for semantic search.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "path": {"description": "Path to project root directory", "type": "string"},
                "watch": {
                    "description": "Enable file watching for auto-reindex (optional, deferred)",
                    "type": "boolean",
                    "default": False,
                },
            },
            "required": ["path"],
        },
    },
    "search_code": {
        "description": "Semantic search over indexed code.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"description": "Search query text", "type": "string"},
                "project_id": {"description": "Filter by project (optional)", "type": "string", "nullable": True},
                "limit": {"description": "Maximum results (default: 10, max: 50)", "type": "integer", "default": 10},
            },
            "required": ["query"],
        },
    },
    "get_index_status": {
        "description": "Get indexing status for a project.",
        "inputSchema": {
            "type": "object",
            "properties": {"project_id": {"description": "Project ID to check", "type": "string"}},
            "required": ["project_id"],
        },
    },
    "list_projects": {
        "description": "List all indexed projects.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    "delete_project": {
        "description": "Delete all indexed code chunks for a project.",
        "inputSchema": {
            "type": "object",
            "properties": {"project_id": {"description": "Project ID to delete", "type": "string"}},
            "required": ["project_id"],
        },
    },
}
