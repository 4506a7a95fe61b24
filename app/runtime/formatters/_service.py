"""Which formatters a project has and running them: OpenCode 1.18's ``Format`` service.

``formatter`` in opencode.json: omitted or false, none; true, every built-in; an object, the
built-ins with each entry's overrides (``{"disabled": true}`` removes one, and disabling ``ruff``
or ``uv`` removes both; an entry with a ``command`` runs that instead, and a new name adds a
formatter with its ``command``, ``extensions`` and ``environment``).

Whether a formatter is enabled is checked when it is first needed and kept once it is, per
directory and configuration (as OpenCode keeps it per instance): a program installed later is
found by the next check.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from app.config import ConfigLoader
from app.processes import find_program, tied
from app.runtime.formatters._builtins import BUILTINS, FILE, Builtin, Project

log = logging.getLogger("opensession.formatters")

# A formatter that has not finished by then is killed (OpenCode waits for ever).
FORMAT_TIMEOUT_SECONDS = 30.0
_TRUE = frozenset({"1", "true", "yes", "on", "y"})


class FormatterStatus(TypedDict):
    """``GET /formatter``'s entries (OpenCode's ``FormatterStatus``)."""

    name: str
    extensions: list[str]
    enabled: bool


@dataclass(frozen=True, slots=True)
class Formatter:
    name: str
    extensions: tuple[str, ...]
    enabled: Callable[[Project], list[str] | None]
    environment: dict[str, str] = field(default_factory=dict)


def _strings(value: Any) -> list[str] | None:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else None


def _configured(section: bool | dict[str, Any]) -> list[Formatter]:
    """The formatters ``section`` (the ``formatter`` key) turns on, in OpenCode's order:
    built-ins first, then new names in the order written."""
    if section is False:
        return []
    chosen: dict[str, Formatter] = {b.name: Formatter(b.name, b.extensions, b.enabled, b.environment) for b in BUILTINS}
    if section is True:
        return list(chosen.values())
    builtins: dict[str, Builtin] = {b.name: b for b in BUILTINS}

    def disabled(name: str) -> bool:
        entry = section.get(name)
        return isinstance(entry, dict) and entry.get("disabled") is True

    for name, entry in section.items():
        spec = entry if isinstance(entry, dict) else {}
        if name in ("ruff", "uv") and (disabled("ruff") or disabled("uv")):
            chosen.pop("ruff", None)
            chosen.pop("uv", None)
            continue
        if spec.get("disabled") is True:
            chosen.pop(name, None)
            continue
        builtin = builtins.get(name)
        command = _strings(spec.get("command")) or None
        extensions = _strings(spec.get("extensions"))
        env = spec.get("environment")
        environment = {k: str(v) for k, v in env.items()} if isinstance(env, dict) else {}
        base = chosen.get(name) or Formatter(name, (), lambda _p: None)
        check = builtin.enabled if builtin is not None and command is None else _fixed(command)
        chosen[name] = replace(
            base,
            extensions=tuple(extensions) if extensions is not None else base.extensions,
            enabled=check,
            environment={**base.environment, **environment},
        )
    return list(chosen.values())


def _fixed(command: list[str] | None) -> Callable[[Project], list[str] | None]:
    """A configured ``command``: enabled whenever it is given."""
    return lambda _project: list(command) if command else None


def _worktree(directory: Path) -> Path:
    """The git work tree holding ``directory`` (where look-ups stop), else the directory."""
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return candidate
    return directory


@dataclass
class _Instance:
    """A directory's formatters under one configuration, with the commands found so far."""

    key: str
    project: Project
    formatters: list[Formatter]
    commands: dict[str, list[str]] = field(default_factory=dict)

    def command(self, formatter: Formatter) -> list[str] | None:
        """Blocking (a check reads files and may run the program)."""
        found = self.commands.get(formatter.name)
        if found is None:
            found = formatter.enabled(self.project)
            if found:
                self.commands[formatter.name] = found
        return found


class Formatters:
    def __init__(self, config: ConfigLoader, env: dict[str, str] | None = None) -> None:
        self._config = config
        self._env = os.environ if env is None else env
        self._instances: dict[str, _Instance] = {}

    def enabled(self, directory: str) -> bool:
        """Whether ``formatter`` is on for ``directory`` (cheap: the configuration is cached)."""
        return self._config.load(directory).formatter is not False

    def _instance(self, directory: str) -> _Instance:
        section = self._config.load(directory).formatter
        key = json.dumps(section, sort_keys=True, default=str)
        current = self._instances.get(directory)
        if current is None or current.key != key:
            root = Path(directory)
            oxfmt = self._env.get("OPENCODE_EXPERIMENTAL_OXFMT", "").strip().lower() in _TRUE
            project = Project(root, _worktree(root), experimental_oxfmt=oxfmt)
            current = self._instances[directory] = _Instance(key, project, _configured(section))
        return current

    def dispose(self, directory: str) -> None:
        """Forget what was found for ``directory`` (``POST /instance/dispose``)."""
        self._instances.pop(directory, None)

    async def status(self, directory: str) -> list[FormatterStatus]:
        """``GET /formatter``: every configured formatter and whether it is enabled (``[]`` when
        formatters are off)."""
        if not self.enabled(directory):
            return []
        instance = self._instance(directory)

        def check() -> list[FormatterStatus]:
            return [
                {"name": f.name, "extensions": list(f.extensions), "enabled": instance.command(f) is not None}
                for f in instance.formatters
            ]

        return await asyncio.to_thread(check)

    async def format(self, directory: str, path: Path) -> bool:
        """Run each enabled formatter for ``path``'s extension on it, in turn (cwd the
        directory, ``$FILE`` the path). True if any ran; a failure is only logged."""
        if not self.enabled(directory):
            return False
        instance = self._instance(directory)
        extension = path.suffix or path.name
        matching = [f for f in instance.formatters if extension in f.extensions]
        if not matching:
            return False
        commands = await asyncio.to_thread(lambda: [(f, instance.command(f)) for f in matching])
        ran = False
        for formatter, command in commands:
            if command is None:
                continue
            ran = True
            await self._run(formatter, [arg.replace(FILE, str(path), 1) for arg in command], directory)
        return ran

    async def _run(self, formatter: Formatter, argv: list[str], directory: str) -> None:
        env = {**self._env, **formatter.environment}
        started = time.monotonic()
        try:
            program = find_program(argv[0], env) or argv[0]
            process = await asyncio.create_subprocess_exec(
                *tied([program, *argv[1:]], env),
                cwd=directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            log.error("formatter %s could not start (%s): %s", formatter.name, argv, exc)
            return
        try:
            code = await asyncio.wait_for(process.wait(), FORMAT_TIMEOUT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
            log.error("formatter %s timed out after %.0f s: %s", formatter.name, FORMAT_TIMEOUT_SECONDS, argv)
            return
        except asyncio.CancelledError:
            process.kill()
            raise
        if code != 0:
            log.error("formatter %s failed (exit %s): %s", formatter.name, code, argv)
        else:
            log.debug("formatted with %s in %.0f ms", formatter.name, (time.monotonic() - started) * 1000)
