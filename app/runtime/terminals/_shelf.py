"""Where the keepers of this database's terminals are found on this machine, so a server that
starts (or one that runs beside a server that stopped or died) takes them up.

A directory private to the user (``<tmp>/opensession-<uid>/<database key>``, mode 0700: a Unix
socket's path must stay under about 100 bytes, which a data directory need not), holding for
each terminal its keeper's socket (``<id>.sock``) and what a server needs to serve it again
(``<id>.json``: its info, instance directory, whether it stays listed once exited, and the
cursor its output had reached). The key is the database's: every server process of one
database on this machine shares it, and servers of other databases never see these terminals.
The JSON is written only once a server is attached to the keeper, so no server takes up a
keeper that its creator has not yet."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("opensession.terminals")


@dataclass(frozen=True, slots=True)
class Shelved:
    """What a server needs to serve a terminal it takes up."""

    info: dict[str, Any]
    directory: str
    keep_exited: bool
    cursor: int

    @property
    def pty_id(self) -> str:
        return str(self.info["id"])


class UnsafeShelf(OSError):
    """The shelf's directory is not this user's alone: nothing is kept there."""


class Shelf:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def for_database(cls, database: str) -> Shelf:
        key = hashlib.sha256(database.encode()).hexdigest()[:16]
        return cls(Path(tempfile.gettempdir()) / f"opensession-{os.getuid()}" / key)

    def _ready(self) -> Path:
        """The directory, made if need be; refused unless this user owns it and its parent, and
        nobody else may enter them (another user could read every terminal's output)."""
        for directory in (self.root.parent, self.root):
            directory.mkdir(mode=0o700, exist_ok=True)
            found = os.lstat(directory)
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
                raise UnsafeShelf(f"{directory} is not a directory private to this user")
        return self.root

    def socket(self, pty_id: str) -> str:
        return str(self._ready() / f"{pty_id}.sock")

    def save(self, shelved: Shelved) -> None:
        record = {
            "info": shelved.info,
            "directory": shelved.directory,
            "keepExited": shelved.keep_exited,
            "cursor": shelved.cursor,
        }
        path = self._ready() / f"{shelved.pty_id}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(record))
        partial.replace(path)  # a reader sees the old record or the new one, never half of one

    def drop(self, pty_id: str) -> None:
        for suffix in (".json", ".sock"):
            (self.root / f"{pty_id}{suffix}").unlink(missing_ok=True)

    def listed(self) -> list[Shelved]:
        """The terminals kept here (a record that cannot be read is dropped, with its socket)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob("*.json")):
            try:
                record = json.loads(path.read_text())
                found.append(Shelved(record["info"], record["directory"], record["keepExited"], record["cursor"]))
            except FileNotFoundError:
                continue  # dropped meanwhile
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("dropping the unreadable terminal record %s: %r", path, exc)
                self.drop(path.stem)
        return found
