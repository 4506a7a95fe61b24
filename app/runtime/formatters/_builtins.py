"""The built-in formatters, in the order OpenCode 1.18 lists them, each with the check that
decides whether it is enabled for a project (its program found, and for some a config file or a
dependency the project declares) and the command it then runs (``$FILE`` stands for the file).

A check only looks: it never installs anything. Where OpenCode installs prettier or biome from
npm itself, the project's own ``node_modules/.bin`` or PATH is where they are found here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.processes import find_program

FILE = "$FILE"


@dataclass(frozen=True, slots=True)
class Project:
    """Where a check looks: the instance directory, up to its work tree (the git root, or the
    directory itself outside git), and the switches of the environment."""

    directory: Path
    worktree: Path
    experimental_oxfmt: bool = False

    def find_up(self, name: str) -> list[Path]:
        """``name`` in the directory and each parent up to the work tree, nearest first."""
        found, current = [], self.directory
        while True:
            candidate = current / name
            if candidate.exists():
                found.append(candidate)
            if current == self.worktree or current.parent == current:
                return found
            current = current.parent


Check = Callable[[Project], list[str] | None]


@dataclass(frozen=True, slots=True)
class Builtin:
    name: str
    extensions: tuple[str, ...]
    enabled: Check
    environment: dict[str, str] = field(default_factory=dict)


def _on_path(program: str, *args: str) -> Check:
    """Enabled when ``program`` is found; runs it with ``args``."""

    def check(_project: Project) -> list[str] | None:
        found = find_program(program)
        return [found, *args] if found else None

    return check


def _with_config(config: str, program: str, *args: str) -> Check:
    """Enabled when a ``config`` file is found up the tree and ``program`` is found."""

    def check(project: Project) -> list[str] | None:
        found = find_program(program) if project.find_up(config) else None
        return [found, *args] if found else None

    return check


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_read(path))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _declares(manifest: dict[str, Any], package: str, sections: tuple[str, ...]) -> bool:
    return any(isinstance(manifest.get(s), dict) and manifest[s].get(package) for s in sections)


def _ruff(project: Project) -> list[str] | None:
    """ruff when it is found and the project configures it (``[tool.ruff]``, a ruff.toml) or
    names it (requirements.txt, pyproject.toml, Pipfile)."""
    program = find_program("ruff")
    if program is None:
        return None
    command = [program, "format", FILE]
    for name in ("pyproject.toml", "ruff.toml", ".ruff.toml"):
        found = project.find_up(name)
        if found and (name != "pyproject.toml" or "[tool.ruff]" in _read(found[0])):
            return command
    for name in ("requirements.txt", "pyproject.toml", "Pipfile"):
        found = project.find_up(name)
        if found and "ruff" in _read(found[0]):
            return command
    return None


def _succeeds(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done if done.returncode == 0 else None


def _uv(project: Project) -> list[str] | None:
    """``uv format`` where ruff is not enabled and this uv has the command."""
    if _ruff(project) is not None:
        return None
    program = find_program("uv")
    if program is None or _succeeds([program, "format", "--help"]) is None:
        return None
    return [program, "format", "--", FILE]


def _air(_project: Project) -> list[str] | None:
    """air, the R formatter (another program may be called air: its help must say so)."""
    program = find_program("air")
    done = _succeeds([program, "--help"]) if program else None
    first = done.stdout.split("\n")[0] if done else ""
    return [program, "format", FILE] if program and "R language" in first and "formatter" in first else None


def _node_program(project: Project, name: str) -> str | None:
    """A JavaScript tool: the project's ``node_modules/.bin`` up the tree, else PATH."""
    for bin_dir in project.find_up("node_modules"):
        candidate = bin_dir / ".bin" / name
        if candidate.is_file():
            return str(candidate)
    return find_program(name)


def _npm_declared(package: str, program: str, *args: str, flag: str | None = None) -> Check:
    """Enabled when a package.json up the tree lists ``package`` in (dev)dependencies."""

    def check(project: Project) -> list[str] | None:
        if flag == "oxfmt" and not project.experimental_oxfmt:
            return None
        for manifest in project.find_up("package.json"):
            if _declares(_json(manifest), package, ("dependencies", "devDependencies")):
                found = _node_program(project, program)
                return [found, *args] if found else None
        return None

    return check


def _biome(project: Project) -> list[str] | None:
    if not (project.find_up("biome.json") or project.find_up("biome.jsonc")):
        return None
    found = _node_program(project, "biome")
    return [found, "format", "--write", FILE] if found else None


def _pint(project: Project) -> list[str] | None:
    for manifest in project.find_up("composer.json"):
        if _declares(_json(manifest), "laravel/pint", ("require", "require-dev")):
            return ["./vendor/bin/pint", FILE]
    return None


WEB = (
    *(".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts", ".html", ".htm", ".css", ".scss"),
    *(".sass", ".less", ".vue", ".svelte", ".json", ".jsonc", ".yaml", ".yml", ".toml", ".xml", ".md"),
    *(".mdx", ".graphql", ".gql"),
)
JS = (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts")
PYTHON = (".py", ".pyi")
RUBY = (".rb", ".rake", ".gemspec", ".ru")
C_FAMILY = (".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".h++", ".ino", ".C", ".H")
BUN = {"BUN_BE_BUN": "1"}

BUILTINS: tuple[Builtin, ...] = (
    Builtin("zig", (".zig", ".zon"), _on_path("zig", "fmt", FILE)),
    Builtin("uv", PYTHON, _uv),
    Builtin("terraform", (".tf", ".tfvars"), _on_path("terraform", "fmt", FILE)),
    Builtin("standardrb", RUBY, _on_path("standardrb", "--fix", FILE)),
    Builtin("shfmt", (".sh", ".bash"), _on_path("shfmt", "-w", FILE)),
    Builtin("rustfmt", (".rs",), _on_path("rustfmt", FILE)),
    Builtin("ruff", PYTHON, _ruff),
    Builtin("rubocop", RUBY, _on_path("rubocop", "--autocorrect", FILE)),
    Builtin("air", (".R",), _air),
    Builtin("prettier", WEB, _npm_declared("prettier", "prettier", "--write", FILE), BUN),
    Builtin("pint", (".php",), _pint),
    Builtin("oxfmt", JS, _npm_declared("oxfmt", "oxfmt", FILE, flag="oxfmt"), BUN),
    Builtin("ormolu", (".hs",), _on_path("ormolu", "-i", FILE)),
    Builtin("ocamlformat", (".ml", ".mli"), _with_config(".ocamlformat", "ocamlformat", "-i", FILE)),
    Builtin("nixfmt", (".nix",), _on_path("nixfmt", FILE)),
    Builtin("mix", (".ex", ".exs", ".eex", ".heex", ".leex", ".neex", ".sface"), _on_path("mix", "format", FILE)),
    Builtin("latexindent", (".tex",), _on_path("latexindent", "-w", "-s", FILE)),
    Builtin("ktlint", (".kt", ".kts"), _on_path("ktlint", "-F", FILE)),
    Builtin("htmlbeautifier", (".erb", ".html.erb"), _on_path("htmlbeautifier", FILE)),
    Builtin("gofmt", (".go",), _on_path("gofmt", "-w", FILE)),
    Builtin("gleam", (".gleam",), _on_path("gleam", "format", FILE)),
    Builtin("dfmt", (".d",), _on_path("dfmt", "-i", FILE)),
    Builtin("dart", (".dart",), _on_path("dart", "format", FILE)),
    Builtin("cljfmt", (".clj", ".cljs", ".cljc", ".edn"), _on_path("cljfmt", "fix", "--quiet", FILE)),
    Builtin("clang-format", C_FAMILY, _with_config(".clang-format", "clang-format", "-i", FILE)),
    Builtin("biome", WEB, _biome, BUN),
)
