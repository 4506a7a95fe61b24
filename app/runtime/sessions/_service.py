"""Session lifecycle: create, read, update, delete. Every change is a durable event; the session
row is its projection."""

from __future__ import annotations

import logging
import os
import random
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from app import __version__, ids
from app.clock import iso_from_ms, now_ms
from app.events.log import EventLog, Transaction
from app.events.model import Event
from app.jsonutil import dumps, loads
from app.runtime.errors import Conflict, ProjectNotFound, RequestKeyConflict, SessionNotFound
from app.runtime.sessions._project import (
    forget,
    init_repository,
    learn,
    project_id,
    project_info,
    project_of,
    projects,
    resolved,
    with_settings,
)
from app.store import project_places, project_settings, request_keys
from app.store.project_places import Place
from app.store.queries import Queries, session_exists, session_info
from app.wire import GlobalSession, Session

log = logging.getLogger("opensession.sessions")

# Sessions a long list reads per query (``SessionService.walk``): what it holds in memory at once.
LIST_PAGE = 500
DEFAULT_TITLE = re.compile(r"^(New session - |Child session - )\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_ADJECTIVES = (
    "brave",
    "calm",
    "eager",
    "gentle",
    "jolly",
    "keen",
    "lucky",
    "misty",
    "proud",
    "quiet",
    "rapid",
    "shiny",
    "swift",
    "tidy",
    "vivid",
    "witty",
)
_NOUNS = (
    "cabin",
    "comet",
    "falcon",
    "forest",
    "island",
    "knight",
    "meadow",
    "otter",
    "river",
    "star",
    "tiger",
    "willow",
    "harbor",
    "canyon",
    "lantern",
    "pebble",
)

Mutation = Callable[[Session], object]  # what it returns is ignored (a lambda may pop a key)


def zero_tokens() -> dict[str, Any]:
    return {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def is_default_title(title: str) -> bool:
    return bool(DEFAULT_TITLE.match(title))


class _InfoCache:
    """Committed session infos (as JSON text) of recently used sessions, so the hot path does
    not re-read a row it wrote a moment ago. Entries change only after a commit (and are all
    dropped if a commit other transactions already built on is lost). A row read from a reader
    connection is kept only if no write changed the cache while it was being read: else it may
    be older than what the write put there.

    Directories are kept apart and outlive ``clear``: a session's directory never changes, so a
    lost commit cannot make one stale, and status announcements (which cannot wait for a read)
    still reach the session's directory after a failed commit (a full disk)."""

    def __init__(self, size: int = 2048, *, infos: bool = True) -> None:
        self._size = size
        self._infos = infos  # False: other processes change sessions too, so keep only directories
        self._entries: OrderedDict[str, str] = OrderedDict()  # id -> info JSON
        self._directories: OrderedDict[str, str] = OrderedDict()
        self.generation = 0  # changes with every put, drop and clear

    def get(self, session_id: str) -> Session | None:
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        self._entries.move_to_end(session_id)
        session: Session = loads(entry)  # a fresh copy: callers may change it
        return session

    def directory(self, session_id: str) -> str | None:
        """A session's directory (it never changes), without decoding its info."""
        return self._directories.get(session_id)

    def put(self, info: Session) -> None:
        self.generation += 1
        kept = ((self._entries, dumps(info)),) if self._infos else ()
        for entries, value in (*kept, (self._directories, info["directory"])):
            entries[info["id"]] = value
            entries.move_to_end(info["id"])
            if len(entries) > self._size:
                entries.popitem(last=False)

    def put_read(self, info: Session, generation: int) -> None:
        """Keep ``info``, read when the cache was at ``generation``, unless it changed since."""
        if generation == self.generation:
            self.put(info)

    def drop(self, session_id: str) -> None:
        self.generation += 1
        self._entries.pop(session_id, None)
        self._directories.pop(session_id, None)

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()


async def _recorded_elsewhere(directory: str, recorded: Place | None) -> Place:
    """The project of a directory this machine lacks: as a process that has it ``recorded`` it
    (and named so here from now on), else ``global``."""
    if recorded is None:
        return await resolved(directory)
    learn(directory, recorded)
    return recorded


class SessionService:
    def __init__(self, log: EventLog, queries: Queries) -> None:
        self.log = log
        self.queries = queries
        self._cache = _InfoCache(infos=not log.db.shared)
        self._recorded: set[str] = set()  # directories whose place this process has recorded
        log.db.on_lost_writes(self._cache.clear)
        log.db.on_lost_writes(self._recorded.clear)

    async def place(self, directory: str) -> Place:
        """``directory``'s project: resolved here when this machine has the directory, else as
        a process whose machine has it recorded it (``project_places``), else ``global``."""
        if os.path.isdir(directory):
            return await resolved(directory)
        return await _recorded_elsewhere(directory, await project_places.place(self.log.db, directory))

    def record_place(self, tx: Transaction, directory: str, found: Place) -> None:
        """Record ``found`` for the other machines in ``tx``, if this machine has ``directory``
        (once per process: a session's creation costs no more than a statement)."""
        if directory not in self._recorded and os.path.isdir(directory):
            project_places.record(tx.scope, directory, found)
            tx.scope.after_commit(lambda: self._recorded.add(directory))

    async def projects(self, current: str) -> list[dict[str, Any]]:
        """The projects this server knows: ``current``'s, then those its sessions are in, each with
        what clients set on it. A directory this machine has is seen here, and recorded when it
        was not yet (or its project changed); one it lacks, as recorded where it is."""
        recorded = await project_places.every_place(self.log.db)
        places, changed = [], {}
        for directory, updated in [(current, 0), *await self.queries.session_directories()]:
            if os.path.isdir(directory):
                found = await resolved(directory)
                if not found.same_project(recorded.get(directory)):
                    changed[directory] = found
            else:
                found = await _recorded_elsewhere(directory, recorded.get(directory))
            places.append((found, updated))
        if changed:
            await self._record_places(changed)
        found_projects = projects(places)
        settings = await project_settings.every_settings(self.log.db)
        for info in found_projects:
            if info["id"] in settings:
                with_settings(info, *settings[info["id"]])
        return found_projects

    async def _record_places(self, changed: dict[str, Place]) -> None:
        """Record places seen here for the other machines: a hint a later listing records again,
        so a listing never fails because it could not be written (a full disk, a lost database)."""
        try:
            async with self.log.db.write() as scope:
                for directory, place in changed.items():
                    project_places.record(scope, directory, place)
        except Exception as exc:  # any engine's failure: the listing goes on
            log.warning("could not record the projects of %s: %r", ", ".join(changed), exc)

    async def current_project(self, directory: str) -> dict[str, Any]:
        """``directory``'s project (``place``), with what clients set on it."""
        info = project_of(await self.place(directory))
        found = await project_settings.settings(self.log.db, info["id"])
        return with_settings(info, *found) if found else info

    async def init_git(self, directory: str) -> dict[str, Any]:
        """``git init`` in ``directory`` unless it is in a git work tree already; its project then
        (``vcs`` git; the id stays ``global`` until a first commit, as in OpenCode)."""
        if (await self.current_project(directory))["vcs"] != "git":
            await init_repository(directory)
            forget(directory)
            self._recorded.discard(directory)
            info = await self.current_project(directory)
            self.log.publish(Event("project.updated", info, None, None))
        return await self.current_project(directory)

    async def update_project(self, project_id: str, current: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Set a project's ``name`` (a string), and the keys given of its ``icon`` (``url``,
        ``override``, ``color``) and ``commands`` (``start``), as OpenCode does; the others stay.
        The project must be one ``projects(current)`` lists. Announced as ``project.updated``
        (on the streams of every directory, as OpenCode's global event)."""
        known = {info["id"]: info for info in await self.projects(current)}
        if project_id not in known:
            raise ProjectNotFound(project_id)
        async with self.log.db.write(urgent=True) as scope:
            stored = await project_settings.settings_to_change(scope, project_id)
            settings: dict[str, Any] = stored[0] if stored else {}
            if "name" in changes:
                settings["name"] = changes["name"]
            for key in ("icon", "commands"):
                if key in changes:
                    settings[key] = {**settings.get(key, {}), **changes[key]}
            updated = max(now_ms(), stored[1] + 1 if stored else 0)
            project_settings.save_settings(scope, project_id, settings, updated)
        info = with_settings(known[project_id], settings, updated)
        self.log.publish(Event("project.updated", info, None, None))
        return info

    async def sandboxes(self, project_id: str) -> list[str]:
        """The worktrees created for a project (``POST /experimental/worktree``), oldest first."""
        stored = await project_settings.settings(self.log.db, project_id)
        return list(stored[0].get("sandboxes", [])) if stored else []

    async def change_sandboxes(self, directory: str, *, add: str | None = None, drop: str | None = None) -> None:
        """Add or drop a worktree of ``directory``'s project, kept with what clients set on it,
        and announce the project as ``project.updated`` (as OpenCode does)."""
        pid = await project_id(directory)
        async with self.log.db.write(urgent=True) as scope:
            stored = await project_settings.settings_to_change(scope, pid)
            settings: dict[str, Any] = stored[0] if stored else {}
            listed = [d for d in settings.get("sandboxes", []) if d not in (add, drop)]
            settings["sandboxes"] = listed + ([add] if add else [])
            updated = max(now_ms(), stored[1] + 1 if stored else 0)
            project_settings.save_settings(scope, pid, settings, updated)
        info = with_settings(await project_info(directory), settings, updated)
        self.log.publish(Event("project.updated", info, None, None))

    async def create(
        self,
        directory: str,
        *,
        parent_id: str | None = None,
        title: str | None = None,
        permission: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
        workspace_id: str | None = None,
        agent: str | None = None,
        model: dict[str, Any] | None = None,
        session_id: str | None = None,
        request_key: str | None = None,
    ) -> Session:
        """A new session; with ``request_key`` (the request's Idempotency-Key), the one a create
        under that key already made, if any (see ``keyed``)."""
        if parent_id is not None:
            await self.get(parent_id)
        created = now_ms()
        prefix = "Child session - " if parent_id else "New session - "
        place = await self.place(directory)
        info: Session = {
            "id": session_id or ids.session_id(),
            "slug": f"{random.choice(_ADJECTIVES)}-{random.choice(_NOUNS)}",
            "projectID": place.project_id,
            "directory": directory,
            "path": "",
            "cost": 0,
            "tokens": zero_tokens(),
            "title": title if title is not None else prefix + iso_from_ms(created),
            "version": __version__,
            "time": {"created": created, "updated": created},
        }
        if parent_id:
            info["parentID"] = parent_id
        if workspace_id:
            info["workspaceID"] = workspace_id
        if permission is not None:
            info["permission"] = permission
        if metadata is not None:
            info["metadata"] = metadata
        if agent:
            info["agent"] = agent
        if model:
            info["model"] = model
        async with self.log.transaction() as tx:
            if request_key is not None:
                asked = dumps([directory, parent_id, title, permission, metadata, workspace_id, agent, model])
                if earlier := await self.keyed(tx, request_key, f"create {session_id} {asked}", info["id"]):
                    return earlier
            # Checked inside the write transaction: two racing creates with one id cannot both pass.
            if session_id is not None and await session_exists(tx.scope, session_id):
                raise Conflict(f"Session already exists: {session_id}", session_id)
            self.record_place(tx, directory, place)
            await self.emit_created(tx, info)
        return info

    async def keyed(self, tx: Transaction, key: str, request: str, session_id: str) -> Session | None:
        """For a request that creates session ``session_id`` under Idempotency-Key ``key``
        (``request`` says what it asks): the session an earlier copy of the request made, or None
        after recording that ``key`` made ``session_id`` (``tx`` holds the key to its commit)."""
        earlier = await self.claim_key(tx, key, request_keys.Keyed(session_id, request))
        return None if earlier is None else await self.get(earlier.session_id)

    async def claim_key(self, tx: Transaction, key: str, made: request_keys.Keyed) -> request_keys.Keyed | None:
        """What an earlier copy of the request keyed ``key`` made, or None after recording that
        this one makes ``made`` (``tx`` holds the key to its commit, so of two copies in flight
        one does the work). The key used for another request is a conflict."""
        earlier = await request_keys.held(tx.scope, key)
        if earlier is None:
            request_keys.save(tx.scope, key, made)
            return None
        if earlier.request != made.request:
            raise RequestKeyConflict(key, "another request")
        return earlier

    async def emit_created(self, tx: Transaction, info: Session) -> None:
        """Record a new session (built by ``create``, or a copy for a fork) inside ``tx``."""
        await tx.emit(
            "session.created",
            {"sessionID": info["id"], "info": info},
            session_id=info["id"],
            directory=info["directory"],
        )
        tx.scope.after_commit(lambda: self._cache.put(info))

    async def get(self, session_id: str) -> Session:
        info = self._cache.get(session_id)
        if info is None:
            generation = self._cache.generation
            info = await self.queries.session(session_id)
            if info is None:
                raise SessionNotFound(session_id)
            self._cache.put_read(info, generation)
        return info

    def cached_directory(self, session_id: str) -> str | None:
        """The directory of a recently used session, without waiting (status announcements)."""
        return self._cache.directory(session_id)

    async def current(self, tx: Transaction, session_id: str) -> Session:
        """The session info as it stands inside ``tx`` (its own earlier changes included), held
        (``Transaction.hold``) so that no other writer changes it before ``tx`` commits."""
        info = tx.overlay.get(session_id)
        if info is not None:
            return info
        if session_id in tx.held_infos:  # read with the hold, as the transaction began
            raw = tx.held_infos.pop(session_id)
            info = None if raw is None else loads(raw)
        else:
            await tx.hold(session_id)
            info = self._cache.get(session_id) or await session_info(tx.scope, session_id)
        if info is None:
            raise SessionNotFound(session_id)
        tx.overlay[session_id] = info  # held: nobody else changes it until the commit
        return info

    async def mutate(self, tx: Transaction, session_id: str, change: Mutation, *, touch: bool = True) -> Session:
        """Read-modify-write of the session info inside ``tx``: concurrent writers (the turn, the
        title generator, an HTTP PATCH) are serialised by the session's hold (``current``), so
        none loses another's change."""
        info = await self.current(tx, session_id)
        change(info)
        if touch:
            info["time"]["updated"] = max(now_ms(), info["time"]["updated"])
        await tx.emit(
            "session.updated",
            {"sessionID": session_id, "info": info},
            session_id=session_id,
            directory=info["directory"],
        )
        tx.overlay[session_id] = info
        tx.scope.after_commit(lambda: self._cache.put(info))
        return info

    async def update(self, session_id: str, change: Mutation, *, wanted: Callable[[], bool] | None = None) -> Session:
        """``change`` in a transaction of its own (``wanted``: as ``EventLog.transaction``)."""
        async with self.log.transaction(hold=session_id, wanted=wanted) as tx:
            return await self.mutate(tx, session_id, change)

    async def recent(
        self,
        directory: str | None,
        *,
        roots: bool = False,
        start: int | None = None,
        search: str | None = None,
        limit: int | None = None,
    ) -> list[Session]:
        """Sessions most recently updated first (the legacy list)."""
        return await self.queries.sessions(directory=directory, roots=roots, start=start, search=search, limit=limit)

    async def walk(
        self,
        *,
        descending: bool,
        directory: str | None,
        search: str | None,
        limit: int,
        anchor: tuple[int, str] | None = None,
        roots: bool = False,
        start: int | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[list[Session]]:
        """Up to ``limit`` sessions, as ``page`` orders them after ``anchor``, read ``page_size``
        at a time (non-empty pages): a list of any length holds one page in memory, never all.

        Each page is a query of its own, keyed on the last session of the one before, so a session
        updated while the walk goes on moves ahead of it and is left out (the client has its
        ``session.updated`` event); none is listed twice."""
        remaining, most = limit, page_size or LIST_PAGE
        while remaining > 0:
            size = min(most, remaining)
            page = await self.queries.session_page(
                descending=descending,
                directory=directory,
                search=search,
                anchor=anchor,
                limit=size,
                roots=roots,
                start=start,
            )
            if page:
                yield page
            if len(page) < size:
                return
            remaining -= size
            anchor = (page[-1]["time"]["updated"], page[-1]["id"])

    async def children(self, session_id: str) -> list[Session]:
        await self.get(session_id)
        return await self.queries.sessions(directory=None, parent_id=session_id)

    async def page(
        self, *, descending: bool, directory: str | None, search: str | None, anchor: tuple[int, str] | None, limit: int
    ) -> list[Session]:
        """A keyset page by time updated (newest first among equal times), strictly after
        ``anchor`` (the V2 list)."""
        return await self.queries.session_page(
            descending=descending, directory=directory, search=search, anchor=anchor, limit=limit
        )

    async def across_projects(
        self,
        *,
        directory: str | None,
        roots: bool,
        start: int | None,
        before: int | None,
        search: str | None,
        archived: bool,
        limit: int,
    ) -> tuple[list[GlobalSession], int | None]:
        """Sessions of every project, most recently updated first, each with its project (OpenCode's
        ``GET /experimental/session``): ``limit`` of them updated before ``before``, archived ones
        only with ``archived``, and the ``before`` of the next page (None: this is the last).

        The next page starts below the last one's time, so sessions updated in that same
        millisecond all go in this page (it may then hold a few more than ``limit``): none is
        skipped, none repeated. An archived session is known from its info alone, so pages are
        read until enough unarchived ones are found."""
        found: list[Session] = []
        anchor: tuple[int, str] | None = None
        exhausted = False

        def boundary_known() -> bool:  # found holds a session older than the limit-th one
            return len(found) > limit and found[-1]["time"]["updated"] != found[limit - 1]["time"]["updated"]

        while not exhausted and not boundary_known():
            page = await self.queries.session_page(
                descending=True,
                directory=directory,
                search=search,
                anchor=anchor,
                limit=limit + 1,
                roots=roots,
                start=start,
                before=before,
            )
            found += [info for info in page if archived or not info["time"].get("archived")]
            exhausted = len(page) <= limit
            if page:
                anchor = (page[-1]["time"]["updated"], page[-1]["id"])
        cut = min(limit, len(found))
        while 0 < cut < len(found) and found[cut]["time"]["updated"] == found[cut - 1]["time"]["updated"]:
            cut += 1
        listed = [
            GlobalSession(**info, project={"id": info["projectID"], "worktree": info["directory"]})
            for info in found[:cut]
        ]
        more = cut < len(found)
        return listed, listed[-1]["time"]["updated"] if more and listed else None

    async def subtree(self, session_id: str) -> list[Session]:
        """The session and all its descendants, parents before children."""
        tree: list[Session] = []
        frontier = [await self.get(session_id)]
        while frontier:
            current = frontier.pop()
            tree.append(current)
            frontier.extend(await self.queries.sessions(directory=None, parent_id=current["id"]))
        return tree

    async def delete(self, tree: list[Session]) -> None:
        """Delete the sessions of ``subtree()``, children first, in one transaction."""
        async with self.log.transaction() as tx:
            for info in reversed(tree):
                await tx.emit(
                    "session.deleted",
                    {"sessionID": info["id"], "info": info},
                    session_id=info["id"],
                    directory=info["directory"],
                )
            tx.scope.after_commit(lambda: self._forget(tree))

    def _forget(self, tree: list[Session]) -> None:
        for info in tree:
            self._cache.drop(info["id"])
