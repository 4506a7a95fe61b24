"""The built-in language servers (OpenCode 1.18's ids, extensions and root rules), how each is
found, and the ``lsp`` key of opencode.json applied to them.

A server's root is the nearest directory, from the file's up to the instance directory, holding
one of its marker files (the instance directory when there is none); a server with exclusion
markers (typescript: ``deno.json``) does not serve a file under one. Programs are found on PATH
or beside the server's interpreter; ``pyright`` is pyright's ``pyright-langserver`` or else
basedpyright's (a PyPI wheel that brings its own node), and the npm-based servers are the
project's own (``node_modules/.bin``), else on PATH, else installed on demand into the cache
(``_npm``) unless ``OPENCODE_DISABLE_LSP_DOWNLOAD`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.processes import find_program
from app.runtime.lsp._client import Launch
from app.runtime.lsp._npm import npm_program

LOCKFILES = ("package-lock.json", "bun.lockb", "bun.lock", "pnpm-lock.yaml", "yarn.lock")
JS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
PYTHON_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "Pipfile", "pyrightconfig.json")


@dataclass(frozen=True, slots=True)
class Context:
    """What spawning a server may consult: the instance directory and the environment's switches."""

    directory: Path
    env: dict[str, str]
    download: bool = True  # not OPENCODE_DISABLE_LSP_DOWNLOAD
    experimental_ty: bool = False


RootRule = Callable[[Path, Path], Path | None]  # (file, instance directory) -> root, None: not served
Spawn = Callable[[Path, Context], Launch | None]  # (root, context) -> how to start it; blocking


@dataclass(frozen=True, slots=True)
class ServerSpec:
    id: str
    extensions: tuple[str, ...]  # empty: every file
    root: RootRule
    spawn: Spawn

    def serves(self, path: Path) -> bool:
        return not self.extensions or (path.suffix or path.name) in self.extensions


def _has(directory: Path, marker: str) -> bool:
    if "*" in marker:
        return any(directory.glob(marker))
    return (directory / marker).exists()


def _up(markers: tuple[str, ...], file: Path, stop: Path) -> Path | None:
    """The nearest directory from ``file``'s up to ``stop`` holding one of ``markers``."""
    current = file.parent
    while True:
        if any(_has(current, m) for m in markers):
            return current
        if current == stop or current.parent == current or stop not in current.parents:
            return None
        current = current.parent


def nearest(markers: tuple[str, ...], excluded: tuple[str, ...] = (), fallback: bool = True) -> RootRule:
    def root(file: Path, directory: Path) -> Path | None:
        if excluded and _up(excluded, file, directory) is not None:
            return None
        found = _up(markers, file, directory)
        return found if found is not None else (directory if fallback else None)

    return root


def _instance(_file: Path, directory: Path) -> Path:
    return directory


def _program(name: str, *args: str) -> Spawn:
    """A server that is a program found on PATH, run with ``args``."""

    def spawn(_root: Path, ctx: Context) -> Launch | None:
        found = find_program(name, ctx.env)
        return Launch([found, *args]) if found else None

    return spawn


def _project_bin(program: str, start: Path) -> str | None:
    """``program`` in a ``node_modules/.bin`` from ``start`` up (the project installed it)."""
    for directory in (start, *start.parents):
        candidate = directory / "node_modules" / ".bin" / program
        if candidate.is_file():
            return str(candidate)
    return None


def _npm_server(package: str, program: str, *args: str) -> Spawn:
    """A server the project installed, else on PATH, else installed from npm into the cache."""

    def spawn(root: Path, ctx: Context) -> Launch | None:
        found = _project_bin(program, root) or find_program(program, ctx.env)
        if found is None and ctx.download:
            found = npm_program(package, program, ctx.env)
        return Launch([found, *args]) if found else None

    return spawn


def _python_env(root: Path, env: dict[str, str]) -> dict[str, Any]:
    """``{pythonPath}`` of the project's interpreter: ``$VIRTUAL_ENV``, ``.venv`` or ``venv``."""
    candidates = [env.get("VIRTUAL_ENV"), str(root / ".venv"), str(root / "venv")]
    for venv in candidates:
        if venv and os.path.exists(os.path.join(venv, "bin", "python")):
            return {"pythonPath": os.path.join(venv, "bin", "python")}
    return {}


def _pyright(root: Path, ctx: Context) -> Launch | None:
    """pyright's language server, else basedpyright's (told to check as pyright does by
    default, ``standard``: a project's own pyright/basedpyright configuration still wins),
    else npm's pyright."""
    initialization = _python_env(root, ctx.env)
    found = find_program("pyright-langserver", ctx.env)
    if found is None and (based := find_program("basedpyright-langserver", ctx.env)) is not None:
        settings = {"basedpyright": {"analysis": {"typeCheckingMode": "standard"}}}
        return Launch([based, "--stdio"], initialization={**settings, **initialization})
    if found is None and ctx.download:
        found = npm_program("pyright", "pyright-langserver", ctx.env)
    return Launch([found, "--stdio"], initialization=initialization) if found else None


def _ty(root: Path, ctx: Context) -> Launch | None:
    if not ctx.experimental_ty:
        return None
    initialization = _python_env(root, ctx.env)
    found = find_program("ty", ctx.env)
    for venv in (ctx.env.get("VIRTUAL_ENV"), str(root / ".venv"), str(root / "venv")):
        if found is None and venv and os.path.exists(os.path.join(venv, "bin", "ty")):
            found = os.path.join(venv, "bin", "ty")
    return Launch([found, "server"], initialization=initialization) if found else None


def resolve_module(request: str, start: Path) -> Path | None:
    """Node's resolution of a package file (``typescript/lib/tsserver.js``) from ``start``."""
    for directory in (start, *start.parents):
        candidate = directory / "node_modules" / request
        if candidate.is_file():
            return candidate
    return None


def _typescript(root: Path, ctx: Context) -> Launch | None:
    """typescript-language-server, with the project's own TypeScript (``lib/tsserver.js``:
    TypeScript 7's native compiler has none, and is not served)."""
    tsserver = resolve_module("typescript/lib/tsserver.js", ctx.directory)
    if tsserver is None:
        return None
    found = _npm_server("typescript-language-server", "typescript-language-server", "--stdio")(root, ctx)
    if found is None:
        return None
    return Launch(found.argv, initialization={"tsserver": {"path": str(tsserver)}})


def _deno_root(file: Path, directory: Path) -> Path | None:
    return _up(("deno.json", "deno.jsonc"), file, directory)


def _gopls_root(file: Path, directory: Path) -> Path | None:
    return nearest(("go.work",), fallback=False)(file, directory) or nearest(("go.mod", "go.sum"))(file, directory)


BUILTINS: tuple[ServerSpec, ...] = (
    ServerSpec("deno", (".ts", ".tsx", ".js", ".jsx", ".mjs"), _deno_root, _program("deno", "lsp")),
    ServerSpec("typescript", JS, nearest(LOCKFILES, ("deno.json", "deno.jsonc")), _typescript),
    ServerSpec(
        "vue", (".vue",), nearest(LOCKFILES), _npm_server("@vue/language-server", "vue-language-server", "--stdio")
    ),
    ServerSpec(
        "oxlint",
        (*JS, ".vue", ".astro", ".svelte"),
        nearest((".oxlintrc.json", *LOCKFILES, "package.json")),
        _program("oxc_language_server"),
    ),
    ServerSpec(
        "biome",
        (*JS, ".json", ".jsonc", ".vue", ".astro", ".svelte", ".css", ".graphql", ".gql", ".html"),
        nearest(("biome.json", "biome.jsonc", *LOCKFILES)),
        _program("biome", "lsp-proxy", "--stdio"),
    ),
    ServerSpec("gopls", (".go",), _gopls_root, _program("gopls")),
    ServerSpec("ruby-lsp", (".rb", ".rake", ".gemspec", ".ru"), nearest(("Gemfile",)), _program("rubocop", "--lsp")),
    ServerSpec("pyright", (".py", ".pyi"), nearest(PYTHON_MARKERS), _pyright),
    ServerSpec("ty", (".py", ".pyi"), nearest(("pyproject.toml", "ty.toml", *PYTHON_MARKERS)), _ty),
    ServerSpec("elixir-ls", (".ex", ".exs"), nearest(("mix.exs", "mix.lock")), _program("elixir-ls")),
    ServerSpec("zls", (".zig", ".zon"), nearest(("build.zig",)), _program("zls")),
    ServerSpec(
        "csharp",
        (".cs", ".csx"),
        nearest((".slnx", ".sln", ".csproj", "global.json")),
        _program("roslyn-language-server", "--stdio", "--autoLoadProjects"),
    ),
    ServerSpec(
        "fsharp",
        (".fs", ".fsi", ".fsx", ".fsscript"),
        nearest((".slnx", ".sln", ".fsproj", "global.json")),
        _program("fsautocomplete"),
    ),
    ServerSpec(
        "sourcekit-lsp",
        (".swift", ".objc", ".objcpp"),
        nearest(("Package.swift", "*.xcodeproj", "*.xcworkspace")),
        _program("sourcekit-lsp"),
    ),
    ServerSpec("rust", (".rs",), nearest(("Cargo.toml", "Cargo.lock")), _program("rust-analyzer")),
    ServerSpec(
        "clangd",
        (".c", ".cpp", ".cc", ".cxx", ".c++", ".h", ".hpp", ".hh", ".hxx", ".h++"),
        nearest(("compile_commands.json", "compile_flags.txt", ".clangd", "CMakeLists.txt", "Makefile")),
        _program("clangd", "--background-index", "--clang-tidy"),
    ),
    ServerSpec(
        "svelte", (".svelte",), nearest(LOCKFILES), _npm_server("svelte-language-server", "svelteserver", "--stdio")
    ),
    ServerSpec(
        "astro", (".astro",), nearest(LOCKFILES), _npm_server("@astrojs/language-server", "astro-ls", "--stdio")
    ),
    ServerSpec(
        "jdtls",
        (".java",),
        nearest(("pom.xml", "build.gradle", "build.gradle.kts", ".project", ".classpath")),
        _program("jdtls"),
    ),
    ServerSpec(
        "kotlin-ls",
        (".kt", ".kts"),
        nearest(("settings.gradle.kts", "settings.gradle", "build.gradle.kts", "build.gradle", "pom.xml")),
        _program("kotlin-lsp", "--stdio"),
    ),
    ServerSpec(
        "yaml-ls",
        (".yaml", ".yml"),
        nearest(LOCKFILES),
        _npm_server("yaml-language-server", "yaml-language-server", "--stdio"),
    ),
    ServerSpec(
        "lua-ls",
        (".lua",),
        nearest(
            (".luarc.json", ".luarc.jsonc", ".luacheckrc", ".stylua.toml", "stylua.toml", "selene.toml", "selene.yml")
        ),
        _program("lua-language-server"),
    ),
    ServerSpec(
        "php intelephense",
        (".php",),
        nearest(("composer.json", "composer.lock", ".php-version")),
        _npm_server("intelephense", "intelephense", "--stdio"),
    ),
    ServerSpec(
        "prisma",
        (".prisma",),
        nearest(("schema.prisma", "prisma/schema.prisma", "prisma")),
        _program("prisma", "language-server"),
    ),
    ServerSpec(
        "dart",
        (".dart",),
        nearest(("pubspec.yaml", "analysis_options.yaml")),
        _program("dart", "language-server", "--lsp"),
    ),
    ServerSpec(
        "ocaml-lsp",
        (".ml", ".mli"),
        nearest(("dune-project", "dune-workspace", ".merlin", "opam")),
        _program("ocamllsp"),
    ),
    ServerSpec(
        "bash",
        (".sh", ".bash", ".zsh", ".ksh"),
        _instance,
        _npm_server("bash-language-server", "bash-language-server", "start"),
    ),
    ServerSpec(
        "terraform",
        (".tf", ".tfvars"),
        nearest((".terraform.lock.hcl", "terraform.tfstate", "*.tf")),
        _program("terraform-ls", "serve"),
    ),
    ServerSpec(
        "texlab",
        (".tex", ".bib"),
        nearest((".latexmkrc", "latexmkrc", ".texlabroot", "texlabroot")),
        _program("texlab"),
    ),
    ServerSpec(
        "dockerfile",
        (".dockerfile", "Dockerfile"),
        _instance,
        _npm_server("dockerfile-language-server-nodejs", "docker-langserver", "--stdio"),
    ),
    ServerSpec("gleam", (".gleam",), nearest(("gleam.toml",)), _program("gleam", "lsp")),
    ServerSpec(
        "clojure-lsp",
        (".clj", ".cljs", ".cljc", ".edn"),
        nearest(("deps.edn", "project.clj", "shadow-cljs.edn", "bb.edn", "build.boot")),
        _program("clojure-lsp", "listen"),
    ),
    ServerSpec("nixd", (".nix",), nearest(("flake.nix",)), _program("nixd")),
    ServerSpec("tinymist", (".typ", ".typc"), nearest(("typst.toml",)), _program("tinymist")),
    ServerSpec(
        "haskell-language-server",
        (".hs", ".lhs"),
        nearest(("stack.yaml", "cabal.project", "hie.yaml", "*.cabal")),
        _program("haskell-language-server-wrapper", "--lsp"),
    ),
    ServerSpec(
        "julials",
        (".jl",),
        nearest(("Project.toml", "Manifest.toml", "*.jl")),
        _program("julia", "--startup-file=no", "--history-file=no", "-e", "using LanguageServer; runserver()"),
    ),
)


@dataclass(frozen=True, slots=True)
class Override:
    """One entry of the ``lsp`` object."""

    disabled: bool = False
    command: list[str] | None = None
    extensions: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    initialization: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, entry: Any) -> Override:
        spec = entry if isinstance(entry, dict) else {}
        command = spec.get("command")
        extensions = spec.get("extensions")
        env, init = spec.get("env"), spec.get("initialization")
        return cls(
            disabled=spec.get("disabled") is True,
            command=[c for c in command if isinstance(c, str)] or None if isinstance(command, list) else None,
            extensions=tuple(e for e in extensions if isinstance(e, str)) if isinstance(extensions, list) else None,
            env={k: str(v) for k, v in env.items()} if isinstance(env, dict) else {},
            initialization=init if isinstance(init, dict) else {},
        )


def _custom(override: Override) -> Spawn:
    def spawn(_root: Path, _ctx: Context) -> Launch | None:
        assert override.command is not None
        return Launch(list(override.command), env=override.env, initialization=override.initialization)

    return spawn


def configured(section: bool | dict[str, Any], experimental_ty: bool) -> list[ServerSpec]:
    """The servers ``section`` (the ``lsp`` key) turns on: none when off; with ``ty`` in
    ``pyright``'s place only under its experimental switch; each entry of an object disabling
    a server, or starting one with its ``command`` (a built-in keeps its root rule; a new one
    needs ``extensions``, and is rooted at the instance directory)."""
    if section is False:
        return []
    servers = {spec.id: spec for spec in BUILTINS}
    servers.pop("pyright" if experimental_ty else "ty", None)
    if section is True:
        return list(servers.values())
    for server_id, entry in section.items():
        override = Override.of(entry)
        if override.disabled:
            servers.pop(server_id, None)
            continue
        builtin = servers.get(server_id)
        if override.command is None:
            continue  # nothing to start it with: the built-in stays as it is, a new id is ignored
        if builtin is None and override.extensions is None:
            continue  # OpenCode refuses such a configuration: a custom server names its extensions
        servers[server_id] = ServerSpec(
            server_id,
            override.extensions if override.extensions is not None else (builtin.extensions if builtin else ()),
            builtin.root if builtin else _instance,
            _custom(override),
        )
    return list(servers.values())
