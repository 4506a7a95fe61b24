"""The agent's tools, with OpenCode's names and parameter names so models prompted for OpenCode
work unchanged."""
