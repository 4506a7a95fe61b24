"""Creating, listing, resetting and removing a project's worktrees, as OpenCode's server does,
except that only this project's own worktree directories are ever removed or reset."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from app.events.log import EventLog
from app.events.model import Event
from app.jsonutil import dumps
from app.processes import read_on, shell_exit, tied_group
from app.runtime.errors import WorktreeFailed
from app.runtime.sessions import SessionService, project_id
from app.runtime.worktrees import _adds as adds
from app.runtime.worktrees import _fills as fills
from app.runtime.worktrees import _removals as removals
from app.runtime.worktrees._fills import FillClaim, PendingFill
from app.runtime.worktrees._git import (
    SLOW_S,
    Listed,
    Ran,
    common_dir,
    default_target,
    git,
    has_branch,
    note_path,
    repository_lock,
    worktrees,
)
from app.runtime.worktrees._journal import Journal
from app.runtime.worktrees._names import candidates, slug
from app.runtime.worktrees._requests import RequestMark, made_for, mark
from app.wire import Worktree

log = logging.getLogger("opensession.worktrees")

BRANCH_PREFIX = "opencode/"
NOT_GIT = "Worktrees are only supported for git projects"
# Files are written by as many processes as there are cores (git 2.32+; older ones ignore it):
# filling a tree of 10,000 files took half the time or less on 2 cores (bench/worktrees.py).
PARALLEL = ("-c", "checkout.workers=0")

# A removal waits this long for another process's fill or reset of the tree to end.
FILL_WAIT_S = 60.0
CLAIM_POLL_S = 0.05
REMOVAL_POLL_S = 0.2  # how often a removal looks whether another process's removal of the tree ended
START_OUTPUT_KEPT = 64 * 1024  # the end of a start command's output, for the log when it fails

Dispose = Callable[[str], Awaitable[None]]  # ends what the server runs in a directory going away
Homes = list[Path]  # projects' worktree directories, ``<data>/worktree/<project id>``
Claimed = list[tuple[PendingFill, FillClaim]]  # fills to run, each with its claim held


def _failed(kind: str, message: str) -> WorktreeFailed:
    return WorktreeFailed(f"Worktree{kind}Error", message)


def _unwritable(exc: OSError) -> WorktreeFailed:
    """A create refused because the data directory cannot be written (a full disk)."""
    return _failed("CreateFailed", f"Cannot write to the data directory: {exc.strerror}")


class Worktrees:
    """One per runtime. ``data_dir`` holds the worktrees (``worktree/<project id>/<name>``);
    ``dispose`` is called before a worktree is removed."""

    def __init__(self, data_dir: Path, sessions: SessionService, log: EventLog, dispose: Dispose) -> None:
        self._root = data_dir / "worktree"
        self._sessions = sessions
        self._log = log
        self._dispose = dispose
        self._project_locks: dict[str, asyncio.Lock] = {}
        self._tree_locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}  # fills and start commands, per worktree
        # What start commands left running (a server started with ``&``), per worktree: each
        # one's process group and the read of its output, which ends when the last holder does.
        self._running_on: dict[str, list[tuple[int, asyncio.Task[None]]]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._recovering = asyncio.Lock()  # held by a pass over adds and fills cut short

    # -- what every operation checks --------------------------------------------------------------

    async def _project(self, directory: str, kind: str) -> tuple[str, list[Listed]]:
        """``directory``'s project id and the worktrees git lists (the main tree first);
        ``WorktreeNotGitError`` outside a git repository, ``Worktree<kind>Error`` with git's
        words in one whose worktrees git cannot list."""
        listed = await worktrees(directory)
        if listed is None and (pid := await project_id(directory)) != "global":
            # A git repository whose worktrees git cannot list: an add cut short by a kill may
            # have left a half-written administrative directory, which the sweep removes.
            await self._fill_cut_short([self._home(pid)])
            listed = await worktrees(directory)
            if listed is None:
                unlisted = await git(directory, "worktree", "list")
                problem = unlisted.problem("Failed to list git worktrees")
                if "/worktrees/" in problem:  # one of the repository's worktrees is half made
                    problem += "\n(`git worktree prune` removes a worktree whose directory is gone)\n"
                raise _failed(kind, problem)
        if not listed:
            raise _failed("NotGit", NOT_GIT)
        return await project_id(listed[0].path), listed

    def _home(self, pid: str) -> Path:
        return self._root / pid

    def _owned(self, pid: str, entry: Listed) -> bool:
        """Whether ``entry`` is one of the worktree directories this server makes for ``pid``."""
        return Path(entry.real).parent == Path(os.path.realpath(self._home(pid)))

    async def _entry(self, directory: str, pid: str, listed: list[Listed], kind: str) -> Listed | None:
        """The listed linked worktree that ``directory`` is (by real path), refused unless it is
        one of this project's own; None when git lists no such worktree."""
        real = os.path.realpath(directory)
        entry = next((e for e in listed if e.real == real), None)
        if entry is None:
            return None
        if entry is listed[0]:
            if kind == "ResetFailed":
                raise _failed(kind, "Cannot reset the primary workspace")
            raise _failed(kind, f"fatal: '{entry.path}' is a main working tree\n")  # git's refusal
        if not self._owned(pid, entry):
            raise _failed(kind, f"Not a worktree this server created: {entry.path} (git worktree remove it yourself)")
        return entry

    def _lock(self, locks: dict[str, asyncio.Lock], key: str) -> asyncio.Lock:
        return locks.setdefault(key, asyncio.Lock())

    # -- operations ---------------------------------------------------------------------------

    async def list(self, directory: str) -> list[str]:
        """The project's worktrees (its ``sandboxes``), as created; [] outside git."""
        pid = await project_id(directory)
        return [] if pid == "global" else await self._sessions.sandboxes(pid)

    async def create(
        self, directory: str, name: str | None, start_command: str | None, *, request_key: str | None = None
    ) -> Worktree:
        """Add the worktree on a new branch at the main tree's HEAD and answer; it is filled in
        the background (``worktree.ready``/``worktree.failed``), then the start commands run.
        With ``request_key``, the worktree an earlier copy of the request made, if any."""
        pid, listed = await self._project(directory, "CreateFailed")
        main = listed[0].path
        home = self._home(pid)
        asked = dumps([name, start_command])
        async with self._lock(self._project_locks, pid):
            if request_key is not None:
                await self._fill_cut_short([home])  # an add of this request cut short is recorded
                if (made := await asyncio.to_thread(made_for, home, request_key, asked)) is not None:
                    await self._sessions.change_sandboxes(main, add=made["directory"])
                    return made
            try:
                await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
            except OSError as exc:
                raise _unwritable(exc) from exc
            chosen, journal = await self._free_name(home, main, slug(name or ""))
            try:
                target, branch = home / chosen, BRANCH_PREFIX + chosen
                info: Worktree = {"name": chosen, "branch": branch, "directory": str(target)}
                fill = PendingFill(info, main, (start_command or "").strip())
                request = None if request_key is None else RequestMark(request_key, asked, info)
                try:
                    await asyncio.to_thread(adds.write, journal, fill, request)
                except OSError as exc:  # a full disk: nothing was added
                    await asyncio.to_thread(journal.settle)
                    raise _unwritable(exc) from exc
                added = await _added(main, branch, target)
                if not added.ok:
                    await asyncio.to_thread(journal.settle)
                    raise _failed("CreateFailed", added.problem("Failed to create git worktree"))
                held = await asyncio.to_thread(_noted, fill, request, journal)
            finally:
                journal.release()  # unless settled, the sweep finishes the add
        try:
            await self._sessions.change_sandboxes(main, add=info["directory"])
        except BaseException:  # the database is away: the sweep fills and lists it
            if held is not None:
                held.release()
            raise
        self._spawn(info["directory"], self._fill(fill, held))
        return info

    async def start(self) -> None:
        """Finish the adds and fills that a stop or crash cut short, now and every
        ``SWEEP_SECONDS`` (a process sharing the data directory may die mid-add or mid-fill)."""
        await self._fill_cut_short(await asyncio.to_thread(self._homes))
        self._sweeper = asyncio.create_task(self._sweep(), name="worktree fills")

    def _homes(self) -> Homes:
        return [path for path in self._root.glob("*") if path.is_dir()]

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(fills.SWEEP_SECONDS)
            try:
                await self._fill_cut_short(await asyncio.to_thread(self._homes))
            except Exception:  # the next sweep tries again
                log.exception("could not look for worktree fills cut short")

    async def _fill_cut_short(self, homes: Homes) -> None:
        """Fill each worktree in ``homes`` whose add or fill was cut short, listed in its project
        first (the process that made it may have died before it listed it). A claim not handed
        to a fill is let go: the next sweep tries again. One pass at a time: a create waits for
        the sweep's (which may be undoing the add that the create is a retry of)."""
        async with self._recovering:
            await self._recover(homes)

    async def _recover(self, homes: Homes) -> None:
        await self._removals_finished(homes)
        found = await self._adds_recorded(homes)
        found += await asyncio.to_thread(fills.claim_cut_short, homes)
        try:
            while found:
                fill, held = found[0]
                directory = fill.made["directory"]
                log.info("filling worktree %s, whose fill was cut short", directory)
                if directory not in await self._sessions.sandboxes(await project_id(fill.main)):
                    await self._sessions.change_sandboxes(fill.main, add=directory)
                self._spawn(directory, self._fill(fill, held))
                found.pop(0)
        finally:
            for _, held in found:
                held.release()

    async def _adds_recorded(self, homes: Homes) -> Claimed:
        """The fills of the adds cut short in ``homes`` that git completed, recorded (with their
        requests' marks) and claimed, as their makers would have; what git began of the others
        is removed. A journal that cannot be settled now is left to the next sweep."""
        recorded: Claimed = []
        for cut in await asyncio.to_thread(adds.adds_cut_short, homes):
            try:
                if (held := await self._finish_add(cut)) is not None:
                    recorded.append(held)
            except Exception:
                log.exception("could not finish the add of %s", cut.journal.path)
            finally:
                cut.journal.release()
        return recorded

    async def _removals_finished(self, homes: Homes) -> None:
        """Finish the removals cut short in ``homes``; one that cannot be finished now (git
        refuses, the database is away) is left to the next sweep."""
        for journal, removal in await asyncio.to_thread(removals.removals_cut_short, homes):
            try:
                if removal is None:  # its maker died before it wrote the journal: nothing was done
                    await asyncio.to_thread(journal.settle)
                    continue
                if await common_dir(removal.main) is None:
                    continue  # the repository is unreadable now (or gone): the next sweep looks again
                log.info("finishing the removal of worktree %s, cut short", removal.tree)
                async with self._lock(self._tree_locks, removal.real):  # not the project's: a create holds it
                    await self._take_apart(removal, Path(os.path.realpath(journal.path.parent)), journal)
            except WorktreeFailed as failed:
                log.warning("could not finish the removal of %s: %s", removal and removal.tree, failed)
            except Exception:
                log.exception("could not finish the removal of %s", journal.path)
            finally:
                journal.release()

    async def _finish_add(self, cut: adds.AddCutShort) -> tuple[PendingFill, FillClaim] | None:
        """The fill of an add cut short that git finished, recorded and claimed; None once what
        git began of one it did not finish is removed (or when the journal must wait)."""
        if cut.fill is None:  # its maker died before it wrote the journal: nothing was added
            await asyncio.to_thread(cut.journal.settle)
            return None
        common = await common_dir(cut.fill.main)
        if common is None:
            return None  # the repository is unreadable now: the next sweep looks again
        async with repository_lock(common):
            admin = await asyncio.to_thread(adds.added_whole, common, cut.fill)
            if admin is None:
                await self._undo_add(common, cut.fill, cut.journal)
                return None
        log.info("recording worktree %s, whose add was cut short", admin)
        held = await asyncio.to_thread(_noted, cut.fill, cut.request, cut.journal)
        return None if held is None else (cut.fill, held)

    @staticmethod
    async def _undo_add(common: Path, fill: PendingFill, journal: Journal) -> None:
        """Remove what git began of an add it did not finish: the worktree's administrative
        directory first (one half written, an empty ``commondir``, makes git refuse every worktree
        command in the repository), then the tree's directory and the branch."""
        tree = fill.made["directory"]
        log.info("removing what was begun of worktree %s, whose add was cut short", tree)
        await asyncio.to_thread(adds.drop_begun, common, Path(tree), journal)
        await git(fill.main, "branch", "-D", fill.made["branch"])  # git refuses if a tree uses it
        await asyncio.to_thread(journal.settle)

    async def _free_name(self, home: Path, main: str, base: str) -> tuple[str, Journal]:
        """A name no worktree, branch, add or removal under way has, with its add's journal
        begun. A removal's journal is there from before its tree goes until its branch is gone,
        so a name whose tree is gone is free once it has neither branch nor removal journal."""
        for candidate in candidates(base):
            if os.path.lexists(home / candidate) or await has_branch(main, BRANCH_PREFIX + candidate):
                continue
            if await asyncio.to_thread(removals.removing, home / candidate):  # checked after the tree
                continue
            if (journal := await asyncio.to_thread(adds.begin_add, home / candidate)) is not None:
                return candidate, journal
        raise _failed("NameGenerationFailed", "Failed to generate a unique worktree name")

    async def _fill(self, fill: PendingFill, held: FillClaim | None) -> None:
        """Fill the tree, then announce it and run its start commands. Without ``held`` (a claim
        is only missing when the tree vanished as it was made) the fill fails as git says."""
        info, main, directory = fill.made, fill.main, fill.made["directory"]
        try:
            async with self._lock(self._tree_locks, os.path.realpath(directory)):  # as reset and remove take it
                filled = await git(directory, *PARALLEL, "reset", "--hard", timeout=SLOW_S)
                await asyncio.to_thread(fills.done, directory)
                if held is not None:
                    held.release()  # before a reset waiting on the tree here asks for the claim
        finally:
            if held is not None:
                held.release()
        if not filled.ok:
            message = filled.problem("Failed to populate worktree")
            log.warning("worktree %s could not be filled: %s", directory, message.strip())
            self._announce(directory, "worktree.failed", {"message": message})
            return
        await project_id(directory)  # known before the announcement: its frame names the project
        self._announce(directory, "worktree.ready", {"name": info["name"], "branch": info["branch"]})
        await self._start_commands(directory, main, fill.start_command)

    def _announce(self, directory: str, event_type: str, properties: dict[str, str]) -> None:
        self._log.publish(Event(event_type, dict(properties), None, directory))

    async def _start_commands(self, directory: str, main: str, extra: str) -> None:
        """The project's ``commands.start``, then the request's, each ``bash -lc`` in the
        worktree; a failure is logged (and skips the request's after the project's)."""
        project = await self._sessions.current_project(main)
        for kind, command in (("project", project.get("commands", {}).get("start", "")), ("worktree", extra)):
            if command.strip() and not await _run_start(directory, command.strip(), kind, self._running_on):
                return

    def _spawn(self, directory: str, work: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await work
            except Exception:  # a background step never fails a request; it is logged
                log.exception("worktree task failed in %s", directory)

        task = asyncio.create_task(guarded(), name=f"worktree:{directory}")
        running = self._tasks.setdefault(directory, set())
        running.add(task)
        task.add_done_callback(running.discard)

    async def _end_tasks(self, directory: str) -> None:
        """End the fills and start commands running in ``directory``, and what its start
        commands left running."""
        running = list(self._tasks.pop(directory, ()))
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for group, reading in self._running_on.pop(directory, ()):
            if not reading.done():  # a member still holds the output: the group is there
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)

    async def reset(self, instance: str, directory: str) -> bool:
        """Move the worktree ``directory`` of ``instance``'s project (and its branch) to the
        default branch and drop every local change, as OpenCode does; then the start commands
        run again, in the background."""
        pid, listed = await self._project(instance, "ResetFailed")
        main = listed[0].path
        entry = await self._entry(directory, pid, listed, "ResetFailed")
        if entry is None:
            raise _failed("ResetFailed", "Worktree not found")
        target = await default_target(main)
        if target is None:
            raise _failed("ResetFailed", "Default branch not found")
        ref, remote, branch = target
        if remote is not None and branch is not None:
            fetched = await git(main, "fetch", remote, branch, timeout=SLOW_S)
            if not fetched.ok:
                raise _failed("ResetFailed", fetched.problem(f"Failed to fetch {ref}"))
        async with self._lock(self._tree_locks, entry.real):
            held = await asyncio.to_thread(fills.claim, entry.path)
            if held is None:
                raise _failed("ResetFailed", "The worktree is being filled or reset by another process")
            try:
                await asyncio.to_thread(_before_reset, entry.path)
                await self._reset_tree(entry.path, ref)
            finally:
                held.release()
        self._spawn(entry.path, self._start_commands(entry.path, main, ""))
        return True

    async def _reset_tree(self, tree: str, ref: str) -> None:
        steps = [
            ((*PARALLEL, "reset", "--hard", ref), "Failed to reset worktree to target"),
            (("clean", "-ffdx"), "Failed to clean worktree"),
        ]
        if os.path.lexists(os.path.join(tree, ".gitmodules")):  # without, these have nothing to do
            steps += [
                (("submodule", "update", "--init", "--recursive", "--force"), "Failed to update submodules"),
                (("submodule", "foreach", "--recursive", "git reset --hard"), "Failed to reset submodules"),
                (("submodule", "foreach", "--recursive", "git clean -fdx"), "Failed to clean submodules"),
            ]
        for args, fallback in steps:
            ran = await git(tree, *args, timeout=SLOW_S)
            if not ran.ok:
                raise _failed("ResetFailed", ran.problem(fallback))
        status = await git(tree, "status", "--porcelain=v1")
        if not status.ok:
            raise _failed("ResetFailed", status.problem("Failed to read git status"))
        if status.out.strip():
            raise _failed("ResetFailed", f"Worktree reset left local changes:\n{status.out.strip()}")

    async def remove(self, instance: str, directory: str) -> bool:
        """End what runs in the worktree ``directory`` of ``instance``'s project, remove it and
        its branch, and drop it from the project. A directory that does not exist is done
        already (once a removal of it cut short is finished); one that exists but is no worktree
        of this project is refused and left as it is (OpenCode would delete it). While another
        process removes it (this request's first try, or a sweep finishing that), it waits."""
        deadline = time.monotonic() + FILL_WAIT_S
        while True:
            pid, listed = await self._project(instance, "RemoveFailed")
            home = Path(os.path.realpath(self._home(pid)))
            asked = Path(os.path.realpath(directory))
            if asked.parent == home and await asyncio.to_thread(removals.removing, asked):
                await self._fill_cut_short([self._home(pid)])  # this request's first try, cut short
                listed = (await self._project(instance, "RemoveFailed"))[1]
            main = listed[0].path
            entry = await self._entry(directory, pid, listed, "RemoveFailed")
            if entry is None:
                if os.path.lexists(directory):
                    raise _failed("RemoveFailed", "Worktree not found")
                if directory in await self._sessions.sandboxes(pid):
                    await self._sessions.change_sandboxes(main, drop=directory)
                return True
            if directory != entry.path:  # named through a symlink: what runs may be kept under either
                await self._end_tasks(directory)
            branch = entry.branch.removeprefix("refs/heads/") if entry.branch else None
            if await self._removed_here(removals.Removal(main, entry.path, entry.real, branch), home):
                break
            if time.monotonic() >= deadline:
                raise _failed("RemoveFailed", "The worktree is being removed by another process")
            await asyncio.sleep(REMOVAL_POLL_S)
        if directory != entry.path:
            await self._sessions.change_sandboxes(main, drop=directory)
        return True

    async def _removed_here(self, removal: removals.Removal, home: Path) -> bool:
        """Remove the worktree of ``removal``, journaled; False (nothing done) while another
        process holds its journal. Not under the project's lock: the wait for another process's
        fill would hold up creates. No create takes the name meanwhile: the journal is there
        from before the tree goes until the branch is gone (``_free_name``)."""
        async with self._lock(self._tree_locks, removal.real):
            journal: Journal | None = None
            try:
                journal = await asyncio.to_thread(removals.begin_removal, removal)
                if journal is None:
                    return False
            except OSError as exc:  # a full disk, which the removal relieves: it goes on unjournaled
                log.warning("removing worktree %s without a journal: %s", removal.tree, exc)
            try:
                await self._take_apart(removal, home, journal, wait=FILL_WAIT_S)
            except WorktreeFailed:
                if journal is not None:  # answered: the client, not the sweep, decides what next
                    await asyncio.to_thread(journal.settle)
                raise
            finally:
                if journal is not None:
                    journal.release()
        return True

    async def _take_apart(
        self, removal: removals.Removal, home: Path, journal: Journal | None, *, wait: float = 0.0
    ) -> None:
        """Do what is left of ``removal`` (of a tree in ``home``, the project's real worktree
        directory), each step only if it is still to do: end what runs in the tree, take its
        files' claim (waiting up to ``wait`` seconds while another process fills or resets it),
        remove it from git and what git left of its directory, delete its branch, drop it from
        the project; then settle the journal. A step that fails raises, leaving the journal."""
        await self._end_tasks(removal.tree)
        await self._dispose(removal.tree)
        common = await common_dir(removal.main)
        if common is None:
            raise _failed("RemoveFailed", "fatal: not a git repository\n")
        held = await _files_claimed(removal.real, wait)
        try:
            async with repository_lock(common):
                listed = await worktrees(removal.main)
                if listed is None or any(e.real == removal.real for e in listed):
                    removed = await _removed(removal.main, removal.tree)
                    if not removed.ok and await asyncio.to_thread(_write_git_file, common, Path(removal.real)):
                        removed = await _removed(removal.main, removal.tree)
                    if not removed.ok:
                        raise _failed("RemoveFailed", removed.problem("Failed to remove git worktree"))
                await asyncio.to_thread(_remove_leftovers, Path(removal.real), home)
                if removal.branch and await has_branch(removal.main, removal.branch):
                    deleted = await git(removal.main, "branch", "-D", removal.branch)
                    if not deleted.ok:
                        raise _failed("RemoveFailed", deleted.problem("Failed to delete worktree branch"))
        finally:
            if held is not None:
                held.release()
        await self._sessions.change_sandboxes(removal.main, drop=removal.tree)
        if journal is not None:
            await asyncio.to_thread(journal.settle)

    async def stop(self) -> None:
        """Server shutdown: stop looking for fills cut short, cancel fills and end start
        commands still running."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for directory in {*self._tasks, *self._running_on}:
            await self._end_tasks(directory)


def _noted(fill: PendingFill, request: RequestMark | None, journal: Journal) -> FillClaim | None:
    """Claim a new worktree's fill (free: nobody else knows the tree yet), record it, mark the
    request that made the tree, and settle the add's journal, in one step on a thread. Blocking."""
    held = fills.claim(fill.made["directory"])
    try:
        fills.record(fill)
        if request is not None:
            mark(request)
        journal.settle()
    except BaseException:
        if held is not None:
            held.release()
        raise
    return held


async def _added(main: str, branch: str, target: Path) -> Ran:
    """``git worktree add`` of ``target`` on the new ``branch``, under the repository's lock. A
    failed add is undone, branch included: git creates the branch before the worktree and keeps
    it when the worktree fails."""
    common = await common_dir(main)
    if common is None:
        return Ran(128, "", "fatal: not a git repository\n")
    async with repository_lock(common):
        added = await git(main, "worktree", "add", "--no-checkout", "-b", branch, str(target))
        if not added.ok and "already exists" not in added.err:  # else the branch is another's
            await git(main, "branch", "-D", branch)  # checked free before the add; git keeps one in use
        return added


async def _files_claimed(tree: str, seconds: float) -> FillClaim | None:
    """The claim on ``tree``'s files, waited for up to ``seconds`` while another process (or
    task) fills or resets it (git removing a tree that another git is filling fails halfway);
    None when the tree is no worktree any more."""
    deadline = time.monotonic() + seconds
    while (held := await asyncio.to_thread(fills.claim, tree)) is None:
        if await asyncio.to_thread(note_path, tree, fills.FILL_LOCK) is None:
            return None
        if time.monotonic() >= deadline:
            raise _failed("RemoveFailed", "The worktree is being filled or reset by another process")
        await asyncio.sleep(CLAIM_POLL_S)
    return held


async def _removed(main: str, tree: str) -> Ran:
    """``git worktree remove --force`` of ``tree`` (under the repository's lock, which the
    caller holds)."""
    return await git(main, "worktree", "remove", "--force", tree, timeout=SLOW_S)


def _before_reset(tree: str) -> None:
    """Under the tree's claim: a fill cut short is done by the reset (its record dropped), and a
    git killed mid-fill or mid-reset left its lock to nobody. Blocking."""
    fills.done(tree)
    fills.drop_stale_git_lock(tree)


def _write_git_file(common: Path, tree: Path) -> bool:
    """Whether the ``.git`` file of ``tree`` was missing and is written back, pointing at its
    administrative directory under ``common``/worktrees (the one whose ``gitdir`` names the
    tree); False when it was there, or none names the tree. A removal cut short may have deleted
    it and not the rest of the tree, and git refuses to remove a tree without one. ``tree`` is
    one of this project's worktree directories (checked by the caller). Blocking."""
    if os.path.lexists(tree / ".git"):
        return False
    for admin in sorted((common / "worktrees").glob("*/gitdir")):
        try:
            named = admin.read_text().strip()
        except OSError:
            continue
        if os.path.realpath(named) == os.path.realpath(tree / ".git"):
            tree.mkdir(exist_ok=True)  # the removal may have got as far as the tree itself
            (tree / ".git").write_text(f"gitdir: {admin.parent}\n")
            return True
    return False


def _remove_leftovers(tree: Path, home: Path) -> None:
    """What ``git worktree remove`` left of ``tree`` (a file it could not delete), checked once
    more to be a real directory directly under ``home`` before anything is deleted."""
    if tree.parent == home and tree.is_dir() and not tree.is_symlink():
        shutil.rmtree(tree, ignore_errors=True)


async def _run_start(
    directory: str, command: str, kind: str, running_on: dict[str, list[tuple[int, asyncio.Task[None]]]]
) -> bool:
    """Run one start command until its shell exits; True when it succeeded. What it leaves
    running is noted in ``running_on``, to end with the worktree."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *tied_group(["bash", "-lc", command]),
            cwd=directory,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: ending it ends what it started
        )
    except OSError as exc:
        log.warning("worktree %s start command could not run in %s: %s", kind, directory, exc)
        return False
    assert proc.stdout is not None
    stdout, out = proc.stdout, bytearray()

    async def read() -> None:
        while data := await stdout.read(65536):
            out.extend(data)
            del out[:-START_OUTPUT_KEPT]

    reading = asyncio.create_task(read())
    try:
        await shell_exit(proc, reading)  # a server it started with ``&`` runs on
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    finally:
        read_on(reading)
    if not reading.done():
        running_on.setdefault(directory, []).append((proc.pid, reading))
    if proc.returncode != 0:
        log.warning("worktree %s start command failed in %s: %s", kind, directory, out.decode(errors="replace")[-2000:])
        return False
    return True
