"""mneme: an event-sourced, shared memory for AI agents, spoken to over MCP."""

__version__ = "0.1.0"
