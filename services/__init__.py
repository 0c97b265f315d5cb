"""mneme's processes: gateway (MCP), projector (read models), auditor (compliance trail)."""
