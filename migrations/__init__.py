"""Alembic migrations; the server applies them itself at start (``app.store.database``)."""
