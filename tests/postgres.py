"""A throwaway PostgreSQL cluster for the test run: initdb into a temporary directory, a server on a
free loopback port, a fresh database per test, everything removed at the end.

The binaries come from the system (Debian's ``postgresql`` package, which ``.ci/run`` installs);
``OPENSESSION_TEST_PG=postgresql://user@host:port`` points the tests at an existing server instead.
The server refuses to run as root, so under root the cluster belongs to the ``postgres`` user.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from app.store.postgres import PostgresDatabase
from tests.servers import free_port


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Cluster:
    """A PostgreSQL server the tests may create databases on; ``url`` has no database name."""

    url: str
    _directory: Path | None = None
    _bin: Path | None = None
    _owner: str | None = None
    _options: str = ""
    _template: str | None = None  # a database at the newest schema, copied for each test

    def _as_owner(self, *command: str) -> list[str]:
        return ["runuser", "-u", self._owner, "--", *command] if self._owner else list(command)

    def create_database(self) -> str:
        """A new database at the newest schema; returns its SQLAlchemy-style URL.

        Each is a copy of one database the cluster migrated the first time (its migration is the
        test of that path): migrating every test's database cost about 0.15 s a test."""
        if self._template is None:
            template = self._create(None)
            asyncio.run(PostgresDatabase(self._url_of(template)).migrate())
            self._template = template
        return self._url_of(self._create(self._template))

    def _create(self, template: str | None) -> str:
        name = f"t_{secrets.token_hex(6)}"

        async def create() -> None:
            conn = await asyncpg.connect(f"{self.url}/postgres")
            try:
                await conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
            finally:
                await conn.close()

        asyncio.run(create())
        return name

    def _url_of(self, name: str) -> str:
        return f"{self.url.replace('postgresql://', 'postgresql+asyncpg://')}/{name}"

    def halt(self) -> None:
        """Stop the server, keeping its data (``resume`` starts it again on the same port)."""
        assert self._directory is not None and self._bin is not None, "not a cluster of ours"
        subprocess.run(self._pg_ctl("-m", "fast", "stop"), capture_output=True, check=True)

    def resume(self) -> None:
        assert self._directory is not None and self._bin is not None, "not a cluster of ours"
        log = str(self._directory / "server.log")
        subprocess.run(self._pg_ctl("-o", self._options, "-l", log, "-w", "start"), capture_output=True, check=True)

    def _pg_ctl(self, *args: str) -> list[str]:
        assert self._directory is not None and self._bin is not None
        return self._as_owner(str(self._bin / "pg_ctl"), "-D", str(self._directory / "data"), *args)

    def stop(self) -> None:
        if self._directory is None or self._bin is None:
            return
        subprocess.run(
            self._as_owner(str(self._bin / "pg_ctl"), "-D", str(self._directory / "data"), "-m", "immediate", "stop"),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self._directory, ignore_errors=True)


def start_cluster(extra_options: str = "") -> Cluster | None:
    """Start a cluster, or return None when PostgreSQL is not installed here. ``extra_options``
    are more ``-c name=value`` server settings (bench/cluster.py counts statements with them)."""
    if existing := os.environ.get("OPENSESSION_TEST_PG"):
        return Cluster(existing.rstrip("/"))
    binaries = _binaries()
    if binaries is None:
        return None
    directory = Path(tempfile.mkdtemp(prefix="opensession-pg-"))
    owner = None
    if os.geteuid() == 0:
        owner = "postgres"
        entry = pwd.getpwnam(owner)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    cluster = Cluster("", directory, binaries, owner)
    port = free_port()
    data, log = directory / "data", directory / "server.log"
    subprocess.run(
        cluster._as_owner(
            str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        ),
        capture_output=True,
        check=True,
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={directory} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 "
        f"{extra_options}"
    )
    started = subprocess.run(
        cluster._as_owner(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"),
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        detail = log.read_text() if log.exists() else started.stderr
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"could not start the test PostgreSQL server:\n{detail}")
    cluster.url = f"postgresql://postgres@127.0.0.1:{port}"
    cluster._options = options
    return cluster


class OlderTransaction:
    """A transaction held open on a connection of its own, with its id taken: every commit after
    it reaches the event streams only once it ends (``end``), so a test can open a stream while
    what was just written is still on its way."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._conn = self._loop.run_until_complete(
            asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        )
        self._loop.run_until_complete(self._conn.execute("BEGIN"))
        self._loop.run_until_complete(self._conn.fetchval("SELECT pg_current_xact_id()"))

    def end(self) -> None:
        self._loop.run_until_complete(self._conn.execute("COMMIT"))

    def close(self) -> None:
        self._loop.run_until_complete(self._conn.close())
        self._loop.close()
