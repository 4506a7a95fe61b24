"""Request-scoped dependencies shared by the routers: the runtime, the instance directory a
request is scoped to, and validated path identifiers."""

from __future__ import annotations

import os
from typing import Annotated
from urllib.parse import unquote

from fastapi import Depends, Path, Query
from pydantic import Field
from starlette.requests import HTTPConnection

from app.runtime.errors import InvalidInput
from app.runtime.service import Runtime

ID_PATTERN = r"^{prefix}_[0-9A-Za-z]{{1,64}}$"
MAX_INT = 2**63 - 1  # what a SQLite integer holds: query numbers beyond it are refused, not overflowed


def _id(prefix: str) -> object:
    return Field(pattern=ID_PATTERN.format(prefix=prefix))


# Identifier types for request bodies; the prefix is what OpenCode clients rely on.
SessionID = Annotated[str, _id("ses")]
MessageID = Annotated[str, _id("msg")]
PartID = Annotated[str, _id("prt")]
WorkspaceID = Annotated[str, _id("wrk")]

SessionIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="ses"), description="Session ID (ses_...)")]
PartIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="prt"), description="Part ID (prt_...)")]
MessageIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="msg"), description="Message ID (msg_...)")]
PtyIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="pty"), description="PTY ID (pty_...)")]


async def get_runtime(request: HTTPConnection) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def instance_directory(
    request: HTTPConnection,
    directory: Annotated[str | None, Query(description="Project directory the request is scoped to")] = None,
) -> str:
    """``?directory=`` wins, then the ``x-opencode-directory`` header (URI-encoded by the SDK), then
    the server's own directory."""
    value = directory or request.headers.get("x-opencode-directory")
    if not value:
        default: str = request.app.state.runtime.settings.directory
        return default
    return checked_directory(unquote(value), kind="Query")


async def location_directory(
    request: HTTPConnection,
    location: Annotated[
        str | None, Query(alias="location[directory]", description="Project directory (V2 location)")
    ] = None,
    directory: Annotated[str | None, Query(description="Project directory the request is scoped to")] = None,
) -> str:
    """V2 reads name their instance as ``?location[directory]=`` (a deep object); otherwise as the
    legacy routes do."""
    if location:
        return checked_directory(unquote(location), kind="Query")
    return await instance_directory(request, directory)


def checked_directory(value: str, *, kind: str = "Payload") -> str:
    """An absolute, NUL-free directory path, normalised."""
    if "\0" in value or not os.path.isabs(value):
        raise InvalidInput(f"directory must be an absolute path, got {value!r}", kind=kind)
    return os.path.normpath(value)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
DirectoryDep = Annotated[str, Depends(instance_directory)]
LocationDep = Annotated[str, Depends(location_directory)]
