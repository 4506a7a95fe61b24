"""``PATCH /config`` and ``PATCH /global/config``: the settings the OpenCode app and TUI change,
merged into the project's configuration file or the user's (``app/config_edit.py``: as written,
comments and ``{env:...}`` tokens kept, atomically).

Which file: the project's is the one of highest precedence that exists among its
``opencode.json(c)`` and ``.opencode/opencode.json(c)`` (so a change takes effect), else a new
``opencode.json`` (OpenCode's own server writes a ``config.json`` there that it never reads); the
user's is ``opencode.jsonc`` or ``opencode.json`` in their config directory, whichever is read
last, else a new ``opencode.jsonc`` (as OpenCode's).

The body is OpenCode's ``Config``: its keys are checked for their types (a 400 names the key),
unknown keys are dropped (OpenCode's server drops them too, and a key OpenCode does not know
would make OpenCode refuse the file) and ``null`` removes a key. The answer is the file's content
afterwards. A change is announced as OpenCode announces it: ``server.instance.disposed`` for the
directory, ``global.disposed`` for the user's file (clients read the configuration again)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import ConfigDep, DirectoryDep, RuntimeDep
from app.api.responses import JSONBody
from app.config import CONFIG_NAMES, ConfigError
from app.config_edit import MAX_DEPTH, too_deep, update_file
from app.runtime.errors import InvalidInput

router = APIRouter(tags=["config"])

Obj = dict[str, Any]
Action = Literal["ask", "allow", "deny"]


class ConfigPatch(BaseModel):
    """OpenCode's ``Config``, its top-level keys typed; what is inside the objects is the file's
    business (as OpenCode's server, this one reads what it understands and keeps the rest)."""

    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)

    schema_: str | None = Field(default=None, alias="$schema")
    shell: str | None = None
    logLevel: Literal["DEBUG", "INFO", "WARN", "ERROR"] | None = None
    server: Obj | None = None
    command: dict[str, Obj | None] | None = None
    skills: Obj | None = None
    references: Obj | None = None
    reference: Obj | None = None
    watcher: Obj | None = None
    snapshot: bool | None = None
    plugin: list[str | list[Any]] | None = None
    share: Literal["manual", "auto", "disabled"] | None = None
    autoshare: bool | None = None
    autoupdate: bool | Literal["notify"] | None = None
    disabled_providers: list[str] | None = None
    enabled_providers: list[str] | None = None
    model: str | None = None
    small_model: str | None = None
    default_agent: str | None = None
    subagent_depth: Annotated[int, Field(ge=0)] | None = None
    username: str | None = None
    mode: dict[str, Obj | None] | None = None
    agent: dict[str, Obj | None] | None = None
    provider: dict[str, Obj | None] | None = None
    mcp: dict[str, Obj | None] | None = None
    formatter: bool | Obj | None = None
    lsp: bool | Obj | None = None
    instructions: list[str] | None = None
    layout: Literal["auto", "stretch"] | None = None
    permission: Action | Obj | None = None
    tools: dict[str, bool | None] | None = None
    attachment: Obj | None = None
    enterprise: Obj | None = None
    tool_output: Obj | None = None
    compaction: Obj | None = None
    experimental: Obj | None = None

    def patch(self) -> dict[str, Any]:
        """The keys the body gave, ``null`` (remove) included."""
        patch = self.model_dump(by_alias=True, exclude_unset=True)
        if too_deep(patch):
            raise InvalidInput(f"The configuration nests objects or arrays more than {MAX_DEPTH} levels deep")
        return patch


def project_config_file(directory: str) -> Path:
    root = Path(directory)
    files = [root / name for name in CONFIG_NAMES] + [root / ".opencode" / name for name in CONFIG_NAMES]
    existing = [path for path in files if path.is_file()]
    return existing[-1] if existing else root / CONFIG_NAMES[0]


def user_config_file(user_dir: Path) -> Path:
    existing = [user_dir / name for name in CONFIG_NAMES if (user_dir / name).is_file()]
    return existing[-1] if existing else user_dir / "opencode.jsonc"


@router.patch("/config", operation_id="config.update", summary="Update configuration")
async def update_config(runtime: RuntimeDep, directory: DirectoryDep, body: ConfigPatch) -> Response:
    """Merge the body into the project's configuration file; its content afterwards."""
    if not os.path.isdir(directory):
        raise ConfigError(f"Cannot write the configuration of {directory}: no such directory")
    content, changed = await asyncio.to_thread(update_file, project_config_file(directory), body.patch())
    if changed:
        runtime.dispose_instance(directory)
    return JSONBody(content)


@router.patch("/global/config", operation_id="global.config.update", summary="Update global configuration")
async def update_global_config(runtime: RuntimeDep, config: ConfigDep, body: ConfigPatch) -> Response:
    """Merge the body into the user's configuration file; its content afterwards."""
    patch = body.patch()
    if patch.get("shell") == "":  # the app's "default shell": OpenCode removes the key
        patch["shell"] = None
    path = user_config_file(config.user_dir)
    content, changed = await asyncio.to_thread(update_file, path, patch, create_directory=True)
    if changed:
        runtime.dispose_all()
    return JSONBody(content)
