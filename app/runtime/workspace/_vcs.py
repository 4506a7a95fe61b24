"""Version control through ``git`` subprocesses: the branch, what changed in the working tree
(against ``HEAD``, or against the merge base with the default branch) with line counts and
patches, and the raw patch.

Paths are relative to the instance directory and limited to it (``--relative``); renames are
reported as a deletion and an addition (``--no-renames``), as OpenCode's clients expect the three
statuses ``added | deleted | modified``. Untracked files that are not ignored count as added, with
a patch against ``/dev/null``. Outside a git repository every answer is empty. ``git`` runs with
optional locks off, so reading never blocks a concurrent ``git`` command of the user's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.jsonutil import readable
from app.processes import tied
from app.runtime.errors import PatchNotApplied

GIT_TIMEOUT_S = 30.0
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # what an unborn HEAD is compared with
_UNTRACKED_PATCHES = 8  # concurrent `git diff --no-index` runs
_ENV = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
_STATUS = {"A": "added", "D": "deleted"}


async def git(root: Path, *args: str, timeout: float = GIT_TIMEOUT_S, stdin: bytes | None = None) -> tuple[int, bytes]:
    """Run ``git -C root args`` (``stdin`` its input): its exit code and standard output (128 if
    git cannot run)."""
    code, out, _ = await _run(root, args, timeout, stdin, asyncio.subprocess.DEVNULL)
    return code, out


async def run(root: Path, *args: str, timeout: float = GIT_TIMEOUT_S) -> tuple[int, bytes, bytes]:
    """Run ``git -C root args``: its exit code, standard output and standard error (what went
    wrong, for a caller that reports it)."""
    return await _run(root, args, timeout, None, asyncio.subprocess.PIPE)


async def _run(
    root: Path, args: tuple[str, ...], timeout: float, stdin: bytes | None, stderr: int
) -> tuple[int, bytes, bytes]:
    """``git`` with its standard error piped when ``stderr`` says so (else discarded)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *tied(["git", "-c", "core.quotepath=false", "-C", str(root), *args], _ENV),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=_ENV,
        )
    except OSError:
        return 128, b"", b"git cannot run"
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out, err or b""


async def _text(root: Path, *args: str) -> str | None:
    code, out = await git(root, *args)
    return out.decode(errors="replace").strip() if code == 0 else None


async def is_repository(root: Path) -> bool:
    return await _text(root, "rev-parse", "--is-inside-work-tree") == "true"


async def branch(root: Path) -> str | None:
    return await _text(root, "symbolic-ref", "--short", "-q", "HEAD") or None


async def default_branch(root: Path) -> str | None:
    """The remote's HEAD branch, else a local ``main`` or ``master``, else the current branch."""
    remote = await _text(root, "symbolic-ref", "--short", "-q", "refs/remotes/origin/HEAD")
    if remote:
        return remote.removeprefix("origin/")
    for name in ("main", "master"):
        if await _text(root, "rev-parse", "--verify", "-q", f"refs/heads/{name}") is not None:
            return name
    return await branch(root)


async def info(root: Path) -> dict[str, Any]:
    """OpenCode's ``VcsInfo``; outside a repository both fields are null, as OpenCode answers."""
    if not await is_repository(root):
        return {"branch": None, "default_branch": None}
    current, default = await asyncio.gather(branch(root), default_branch(root))
    return {"branch": current, "default_branch": default}


@dataclass(frozen=True, slots=True)
class Change:
    file: str
    additions: int
    deletions: int
    status: str

    def wire(self) -> dict[str, Any]:
        """OpenCode's ``VcsFileStatus``; a name that is not UTF-8 is shown with U+FFFD."""
        return {
            "file": readable(self.file),
            "additions": self.additions,
            "deletions": self.deletions,
            "status": self.status,
        }


def _fields(out: bytes) -> list[str]:
    return [f.decode(errors="surrogateescape") for f in out.split(b"\0") if f]


async def _base(root: Path, mode: str) -> str | None:
    """What the working tree is compared with: HEAD (mode ``git``) or the merge base with the
    default branch (mode ``branch``; none on the default branch itself, as OpenCode answers)."""
    if not await is_repository(root):
        return None
    head = await _text(root, "rev-parse", "--verify", "-q", "HEAD")
    if mode == "git":
        return "HEAD" if head else EMPTY_TREE
    current, default = await asyncio.gather(branch(root), default_branch(root))
    if not head or default is None or current == default:
        return None
    return await _text(root, "merge-base", default, "HEAD")


async def _tracked(root: Path, base: str) -> list[Change]:
    (code_n, numstat), (code_s, names) = await asyncio.gather(
        git(root, "diff", "--no-renames", "--relative", "--numstat", "-z", base),
        git(root, "diff", "--no-renames", "--relative", "--name-status", "-z", base),
    )
    if code_n != 0 or code_s != 0:
        return []
    status_of: dict[str, str] = {}
    pairs = _fields(names)
    for letter, path in zip(pairs[::2], pairs[1::2], strict=False):
        status_of[path] = _STATUS.get(letter[:1], "modified")
    changes = []
    for row in _fields(numstat):
        added, removed, path = row.split("\t", 2)
        status = status_of.get(path, "modified")
        changes.append(Change(path, _count(added), _count(removed), status))
    return changes


def _count(numstat: str) -> int:
    """A numstat count ("-" for a binary file counts as 0, as OpenCode reports it)."""
    return int(numstat) if numstat.isdigit() else 0


def _count_lines(path: Path) -> int:
    """Lines an untracked file adds, as ``git diff --numstat`` counts them (0 for binary)."""
    count, last, sniffed = 0, b"\n", False
    if path.is_symlink():  # git stores the link's target as one line; never read through it
        return 1
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                if not sniffed and b"\0" in chunk[:8000]:
                    return 0
                sniffed = True
                count += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return 0
    return count + (last != b"\n")


async def _untracked(root: Path) -> list[Change]:
    code, out = await git(root, "ls-files", "--others", "--exclude-standard", "-z")
    if code != 0:
        return []
    paths = _fields(out)
    counts = await asyncio.to_thread(lambda: [_count_lines(root / p) for p in paths])
    return [Change(p, n, 0, "added") for p, n in zip(paths, counts, strict=True)]


async def changes(root: Path, mode: str = "git") -> list[Change]:
    """Changed files against the ``mode``'s base, sorted by path."""
    base = await _base(root, mode)
    if base is None:
        return []
    tracked, untracked = await asyncio.gather(_tracked(root, base), _untracked(root))
    return sorted(tracked + untracked, key=lambda c: c.file)


def _split(patch: str) -> list[str]:
    """One chunk per file of a ``git diff`` output (every chunk starts with ``diff --git``)."""
    chunks = patch.split("\ndiff --git ")
    return [chunks[0], *("diff --git " + c for c in chunks[1:])] if patch else []


async def patches(root: Path, mode: str = "git", context: int = 3) -> list[tuple[Change, str]]:
    """Each changed file with its patch, sorted by path."""
    base = await _base(root, mode)
    if base is None:
        return []
    tracked, untracked = await asyncio.gather(_tracked(root, base), _untracked(root))
    code, out = await git(root, "diff", "--no-renames", "--relative", f"-U{context}", base)
    chunks = _split(out.decode(errors="replace")) if code == 0 else []
    found = [(c, (p if p.endswith("\n") else p + "\n")) for c, p in zip(tracked, chunks, strict=False)]
    found += await _untracked_patches(root, untracked, context)
    return sorted(found, key=lambda pair: pair[0].file)


async def _untracked_patches(root: Path, untracked: list[Change], context: int) -> list[tuple[Change, str]]:
    """Each untracked file's patch against ``/dev/null`` (a few ``git diff --no-index`` at a time)."""
    limit = asyncio.Semaphore(_UNTRACKED_PATCHES)

    async def one(change: Change) -> tuple[Change, str]:
        async with limit:
            _, text = await git(root, "diff", "--no-index", f"-U{context}", "--", "/dev/null", change.file)
        return change, text.decode(errors="replace")

    return list(await asyncio.gather(*(one(c) for c in untracked)))


async def raw(root: Path) -> str:
    """The working tree's patch against HEAD, untracked files included (as ``/vcs/diff/raw``)."""
    base = await _base(root, "git")
    if base is None:
        return ""
    code, out = await git(root, "diff", "--no-renames", "--relative", base)
    parts = [out.decode(errors="replace")] if code == 0 and out else []
    parts += [p for _, p in await _untracked_patches(root, await _untracked(root), 3)]
    return "\n".join(parts)


async def apply(root: Path, patch: str) -> None:
    """Apply ``patch`` (paths relative to ``root``, as ``raw`` gives them) to the working tree,
    all of it or nothing (``git apply`` checks every hunk first).

    git reads a patch's paths from the top of the repository and silently skips those outside
    the directory it runs in, so they are prefixed with where ``root`` lies in the repository
    (``--directory``): every path then lands under ``root``. git itself refuses names with ``..``,
    absolute names, ``.git`` and writes through symlinks, but not where a copy is read from: a
    copy could read any file, so patches with copies are refused (``raw`` never makes one)."""
    if not await is_repository(root):
        raise PatchNotApplied("Patch can't be applied because the project is not git-based", "non-git")
    if any(line.startswith(("copy from ", "copy to ")) for line in patch.splitlines()):
        raise PatchNotApplied("Patch can't be applied: it copies a file (send the copy as a new file)", "not-clean")
    prefix = await _text(root, "rev-parse", "--show-prefix")
    where = [f"--directory={prefix}"] if prefix else []
    args = ("apply", "--whitespace=nowarn", *where, "-")
    code, _, err = await _run(root, args, GIT_TIMEOUT_S, patch.encode(), asyncio.subprocess.PIPE)
    if code != 0:
        raise PatchNotApplied(_refusal(err), "not-clean")


def _refusal(stderr: bytes) -> str:
    """The client's message: what git found wrong (its first ``error:`` lines), else nothing more."""
    found = [line.removeprefix("error: ") for line in stderr.decode(errors="replace").splitlines()]
    reasons = [line for line in found if line and not line.startswith(("Checking patch", "Skipped patch"))][:3]
    return "Patch can't be applied" + (": " + "; ".join(reasons) if reasons else "")
