"""OpenCode's legacy routes (``/session...``, ``/event``, ``/global/event``, metadata) as the TUI and
the official SDKs call them.
"""
