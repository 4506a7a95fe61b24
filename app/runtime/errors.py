"""Domain errors raised by the runtime. The HTTP layer maps each to a status and a wire body;
the runtime never knows about HTTP."""

from __future__ import annotations

from app.store.database import DatabaseUnavailable

__all__ = ["DatabaseUnavailable"]  # raised from storage, mapped to 503 like the errors below


class RuntimeFailure(Exception):
    """Base class: ``message`` is safe to show to a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionNotFound(RuntimeFailure):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session not found: {session_id}")
        self.session_id = session_id


class ProjectNotFound(RuntimeFailure):
    def __init__(self, project_id: str) -> None:
        super().__init__(f"Project not found: {project_id}")
        self.project_id = project_id


class MessageNotFound(RuntimeFailure):
    """An unknown message (or an unknown part of a known message, with ``part_id``)."""

    def __init__(self, session_id: str, message_id: str, *, part_id: str | None = None) -> None:
        super().__init__(f"Part not found: {part_id}" if part_id else f"Message not found: {message_id}")
        self.session_id = session_id
        self.message_id = message_id
        self.part_id = part_id


class InvalidInput(RuntimeFailure):
    """The request is well-formed but asks for something that cannot be done. ``kind`` names the
    part of the request at fault (OpenCode's Payload / Query / Headers / Params)."""

    def __init__(self, message: str, *, kind: str = "Payload", field: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.field = field


class PatchNotApplied(RuntimeFailure):
    """``POST /vcs/apply``: the directory is not in a git repository (``non-git``) or the patch
    does not apply to its working tree as it is (``not-clean``); nothing was changed."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class RevertFailed(RuntimeFailure):
    """A revert or unrevert that cannot put the files back as asked: a file outside the
    session's directory, a snapshot the project's snapshot repository never recorded, or git
    failing. Refused before any file moves, unless git fails on the way: then the operation stays
    under way (its journal) and is finished by the next revert operation, takeover or start."""


class InvalidCursor(RuntimeFailure):
    def __init__(self, message: str = "Invalid cursor") -> None:
        super().__init__(message)


class Conflict(RuntimeFailure):
    """The request would reuse an identifier that already names something else."""

    def __init__(self, message: str, resource: str) -> None:
        super().__init__(message)
        self.resource = resource


class InputConflict(Conflict):
    def __init__(self, message_id: str) -> None:
        super().__init__(f"Prompt message ID conflicts with an existing durable record: {message_id}", message_id)


class RequestKeyConflict(Conflict):
    def __init__(self, key: str, used_for: str = "a different prompt in this session") -> None:
        super().__init__(f"Idempotency-Key was already used for {used_for}: {key}", key)


class SessionBusy(RuntimeFailure):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session is busy: {session_id}")
        self.session_id = session_id


class ShareNotFound(RuntimeFailure):
    def __init__(self, token: str) -> None:
        super().__init__("Share not found")
        self.token = token


class PermissionNotFound(RuntimeFailure):
    def __init__(self, request_id: str) -> None:
        super().__init__(f"Permission request not found: {request_id}")
        self.request_id = request_id


class QuestionNotFound(RuntimeFailure):
    def __init__(self, request_id: str) -> None:
        super().__init__(f"Question request not found: {request_id}")
        self.request_id = request_id


class CommandNotFound(RuntimeFailure):
    def __init__(self, name: str) -> None:
        super().__init__(f"Command not found: {name}")
        self.name = name


class TerminalNotFound(RuntimeFailure):
    def __init__(self, pty_id: str) -> None:
        super().__init__(f"PTY session not found: {pty_id}")
        self.pty_id = pty_id


class TerminalForbidden(RuntimeFailure):
    """A terminal request that is refused outright (a ``cwd`` outside the project directory)."""


class PathOutside(RuntimeFailure):
    """A workspace path names something outside the project directory (``..``, an absolute path
    elsewhere, or a symlink leading out). Nothing outside is read."""

    def __init__(self, path: str) -> None:
        super().__init__(f"Access denied: {path} is outside the project directory")
        self.path = path


class PathNotFound(RuntimeFailure):
    def __init__(self, path: str) -> None:
        super().__init__(f"No such file or directory: {path}")
        self.path = path


class SearchUnavailable(RuntimeFailure):
    """The search engine (ripgrep) is missing or failed; the message says which and why."""


class McpServerNotFound(RuntimeFailure):
    def __init__(self, name: str) -> None:
        super().__init__(f"MCP server not found: {name}")
        self.name = name


class McpOAuthUnsupported(RuntimeFailure):
    """OpenCode runs an OAuth flow for remote MCP servers; this server does not host one."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"OAuth for MCP server {name} is not supported here: put its credentials in the server's headers"
        )


class WorktreeFailed(RuntimeFailure):
    """A worktree operation refused or failed; ``name`` is OpenCode's error for it
    (``WorktreeNotGitError``, ``WorktreeCreateFailedError``, ``WorktreeRemoveFailedError``...)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
