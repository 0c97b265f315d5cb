"""The `native` profile: mneme's own tool set, at /mcp and the default over stdio.

Its tools live in services/gateway/*_tools.py, one module per concern, each a Toolset of typed tool functions;
this module orders them as an agent meets them. Twenty tools in five groups an operator can choose from
(`--tools`, MNEME_GATEWAY_TOOLS): core (remember, find, read, change, retire), time (history, diff),
governance (verify, lock, unlock), audit, and graph (entities, relations, traversal); code, system and debug
(an agent's recorded reads, asked again as they were answered) are served when an operator names them. The
`context` argument is not offered unless the operator asks for it (`--context optional|required`): the principal
comes from the bearer token or the stdio settings. Results leave null fields out and answer lists in brief unless
`detail="full"`.
"""

from __future__ import annotations

from services.gateway import (
    code_tools,
    debug_tools,
    governance_tools,
    graph_tools,
    read_tools,
    search_tools,
    system_tools,
    time_tools,
    write_tools,
)
from services.gateway.tool_groups import DEFAULT_TOOL_GROUPS, TOOL_GROUPS
from services.gateway.toolkit import Profile, Toolset

tools = Toolset()
_all = Toolset()
_all.specs = [
    *write_tools.tools.specs,
    *read_tools.tools.specs,
    *search_tools.tools.specs,
    *time_tools.tools.specs,
    *governance_tools.tools.specs,
    *graph_tools.tools.specs,
    *code_tools.tools.specs,
    *system_tools.tools.specs,
    *debug_tools.tools.specs,
]
tools.specs = _all.pick(
    "memory_search", "memory_add", "memory_get", "memory_update", "memory_retire", "memory_list",
    "memory_restore", "memory_move", "memory_stats", "memory_prune_expired",
    "memory_history", "memory_diff",
    "memory_verify", "memory_lock", "memory_unlock",
    "audit_query",
    "graph_entity", "graph_relate", "graph_get", "graph_forget",
    "code_index", "code_search", "code_status", "code_forget",
    "memory_status", "memory_reset",
    "audit_reads", "audit_reread",
)  # fmt: skip
assert len(tools.specs) == len(_all.specs), "a native tool is missing from the order above"

GROUPS = TOOL_GROUPS  # (services/gateway/tool_groups.py names them, for the settings and the command line)
DEFAULT_GROUPS = DEFAULT_TOOL_GROUPS  # the rest (code, system, debug): when an operator asks

PROFILE = Profile(
    name="native",
    tools=tools,
    instructions=(
        "mneme is a memory shared by agents. Before answering from memory, memory_search it; remember new "
        "facts, preferences and decisions with memory_add; correct them with memory_update; when one is wrong "
        "or obsolete, memory_retire it. Results are brief (detail='full' for every field); pass request_id "
        "to make a write safe to retry."
    ),
    context="never",
    drop_nulls=True,
    groups=DEFAULT_GROUPS,
)
