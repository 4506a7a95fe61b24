"""Storage: tables, projectors, compiled SQL statements, read queries and the database engine.

May import: nothing above it (it knows nothing of HTTP, events as objects, or the runtime).
"""
