"""opensession: an OpenCode-compatible agent session server."""

__version__ = "0.1.0"
