"""OpenCode's V2 protocol (``/api/session...``, ``/api/event``): tagged errors, keyset paging, the
per-session gap-free event stream.
"""
