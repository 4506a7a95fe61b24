"""Skills, found where OpenCode looks for them, and the ``skill`` tool that loads one.

A skill is a ``SKILL.md`` with front matter naming it (``name``, ``description``: both strings,
or the file is skipped). Scanned in OpenCode's order, a later skill of the same name replacing an
earlier one: the project's ``.claude/skills`` and ``.agents/skills``, then the user's config
directory and the project's ``.opencode`` (``skill/`` or ``skills/``, any depth), then the
directories named in ``skills.paths``. Read on each request: the files are small and few, and an
added skill shows up without a restart.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import ConfigLoader
from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema

log = logging.getLogger("opensession.skills")

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.S)
SAMPLED_FILES = 10

DESCRIPTION = """Load a specialized skill when the task at hand matches one of the skills listed in the system prompt.

Use this tool to inject the skill's instructions and resources into current conversation. The output may contain detailed workflow guidance as well as references to scripts, files, etc in the same directory as the skill.

The skill name must match one of the skills listed in your system prompt.
"""  # noqa: E501  (OpenCode's wording, which models prompted for OpenCode expect)


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    location: str  # the SKILL.md's absolute path
    content: str  # the body after the front matter, as written

    def as_wire(self) -> dict[str, str]:
        return {"name": self.name, "description": self.description, "location": self.location, "content": self.content}


def parse(path: Path) -> Skill | None:
    """The skill ``path`` defines, or None when it has no valid front matter naming one."""
    import yaml  # lazily: start-up time is tracked

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    match = _FRONT_MATTER.match(text)
    if match is None:
        return None
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        log.warning("skill %s: unreadable front matter: %s", path, exc)
        return None
    if not isinstance(data, dict):
        return None
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not isinstance(description, str):
        return None
    return Skill(name, description, str(path), match.group(2))


def _found(root: str, subdirs: tuple[str, ...]) -> list[Path]:
    """The SKILL.md files under ``root/<subdir>``. Paths are strings until a folder exists: every
    step of a turn looks in six folders, and pathlib's objects cost more than the look itself."""
    found: list[Path] = []
    for sub in subdirs:
        base = os.path.join(root, sub) if sub else root
        if os.path.isdir(base):
            found += sorted(p for p in Path(base).rglob("SKILL.md") if p.is_file())
    return found


class Skills:
    """The skills visible from a directory (see the module docstring for where they come from)."""

    def __init__(self, config: ConfigLoader) -> None:
        self.config = config

    def all(self, directory: str) -> list[Skill]:
        files = _found(os.path.join(directory, ".claude"), ("skills",))
        files += _found(os.path.join(directory, ".agents"), ("skills",))
        for config_dir in (str(self.config.user_dir), os.path.join(directory, ".opencode")):
            files += _found(config_dir, ("skill", "skills"))
        for item in self.config.load(directory).skill_paths:
            files += _found(os.path.join(directory, os.path.expanduser(item)), ("",))
        skills: dict[str, Skill] = {}
        for path in files:
            skill = parse(path)
            if skill is not None:
                skills[skill.name] = skill
        return list(skills.values())

    def get(self, directory: str, name: str) -> Skill | None:
        return next((s for s in self.all(directory) if s.name == name), None)


def available_text(skills: list[Skill]) -> str:
    """The system prompt's listing of the skills the agent may load (OpenCode's verbose form)."""
    lines = ["<available_skills>"]
    for skill in sorted(skills, key=lambda s: s.name):
        lines += [
            "  <skill>",
            f"    <name>{skill.name}</name>",
            f"    <description>{skill.description}</description>",
            f"    <location>{Path(skill.location).as_uri()}</location>",
            "  </skill>",
        ]
    return "\n".join([*lines, "</available_skills>"])


def _sample(folder: Path) -> list[str]:
    """Up to SAMPLED_FILES files beside the skill (hidden ones too, symlinks not followed)."""
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            if "SKILL.md" not in name:
                files.append(os.path.join(dirpath, name))
                if len(files) == SAMPLED_FILES:
                    return files
    return files


class SkillTool:
    name = "skill"
    description = DESCRIPTION
    parameters = schema(
        {"name": {"type": "string", "description": "The name of the skill from available_skills"}}, ["name"]
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        name = require(args, "name")
        skills = ctx.services.skills
        skill = skills.get(str(ctx.directory), name) if skills else None
        if skill is None:
            names = ", ".join(s.name for s in skills.all(str(ctx.directory))) if skills else ""
            raise ToolError(f'Skill "{name}" not found. Available skills: {names or "none"}')
        await ctx.ask("skill", [name], [name], {})
        folder = Path(skill.location).parent
        output = "\n".join(
            [
                f'<skill_content name="{skill.name}">',
                f"# Skill: {skill.name}",
                "",
                skill.content.strip(),
                "",
                f"Base directory for this skill: {folder.as_uri()}",
                "Relative paths in this skill (e.g., scripts/, reference/) are relative to this base directory.",
                "Note: file list is sampled.",
                "",
                "<skill_files>",
                "\n".join(f"<file>{f}</file>" for f in _sample(folder)),
                "</skill_files>",
                "</skill_content>",
            ]
        )
        return ToolResult(
            output, title=f"Loaded skill: {skill.name}", metadata={"name": skill.name, "dir": str(folder)}
        )
