"""Wire types of mneme: events (the log), commands (intent) and queries (projector RPC)."""
