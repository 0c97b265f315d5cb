"""The `native` profile: mneme's own tool set, at /mcp and the default over stdio.

Its tools live in services/gateway/*_tools.py, one module per concern, each a Toolset of typed tool functions;
this module joins them, in the order they are listed (write, read, governance, search, time). Every tool takes
the optional `context` argument (Profile.context "optional") and fails with the native error format.
"""

from __future__ import annotations

from services.gateway import governance_tools, read_tools, search_tools, time_tools, write_tools
from services.gateway.toolkit import Profile, Toolset

tools = Toolset()
tools.specs = [*write_tools.tools.specs, *read_tools.tools.specs, *governance_tools.tools.specs,
               *search_tools.tools.specs, *time_tools.tools.specs]  # fmt: skip

PROFILE = Profile(
    name="native",
    tools=tools,
    instructions=(
        "mneme is a shared, event-sourced memory. Store facts with memory_add (optionally at a store path), "
        "read them back with memory_get / memory_list / memory_recent. Every change is versioned; "
        "pass request_id to make a write safe to retry."
    ),
    context="optional",
)
