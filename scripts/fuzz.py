"""Fuzz every route of a real opensession server with schemathesis, on SQLite and PostgreSQL, and
fail on any 5xx answer or any traceback in the server's log.

Needs schemathesis (``.venv/bin/pip install schemathesis``; not a dev extra) and, for the
PostgreSQL half, the PostgreSQL server binaries (tests/postgres.py starts a throwaway cluster).

Usage::

    .venv/bin/python scripts/fuzz.py                       # both databases, 5 minutes each
    .venv/bin/python scripts/fuzz.py --db sqlite --max-time 60 --max-examples 10 --seed 1
    .venv/bin/python scripts/fuzz.py -- --include-path-regex '^/pty'    # more schemathesis options

For each database it starts ``python -m app.cli serve`` on a free 127.0.0.1 port, in a temporary
sandbox (project directory, config, data and HOME, none of the user's own; the environment keeps
no provider keys), seeds it with objects worth fuzzing against (sessions with messages, a pending
permission and question, a share, terminals, a credential, a saved permission, an MCP server from
tests/mcp_server.py), then runs ``schemathesis run`` against its own OpenAPI document (``/doc``)
for ``--max-time`` seconds with ``--checks not_a_server_error`` (``--conformance`` adds response
schema conformance). The server's process group is stopped afterwards and the sandbox removed
unless ``--keep``.

This file is also the schemathesis hooks module (``SCHEMATHESIS_HOOKS``): before each request it
- puts a seeded id in place of a generated one (a sessionID, messageID, ptyID, share token...) for
  three cases in four, chosen from the generated value so a failure reproduces; DELETEs get ids of
  their own, so the objects the other operations use survive;
- keeps the server's work inside the sandbox: a directory, ``x-opencode-directory`` or terminal
  ``cwd`` naming a place outside it (or going up with ``..``) is moved under ``sandbox/outside``,
  and an http(s) URL in a body (a remote MCP server) is pointed at 127.0.0.1:9, where nothing
  listens. Everything is sent to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SEEDS_ENV = "OPENSESSION_FUZZ_SEEDS"
JSON = {"content-type": "application/json"}
# Environment variables the server keeps; everything else (provider keys, OPENCODE_*, proxies
# the user set) is dropped.
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "VIRTUAL_ENV")


# --------------------------------------------------------------------------- the sandboxed server


def _git(project: Path, *args: str) -> None:
    identity = ["-c", "user.name=fuzz", "-c", "user.email=fuzz@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *identity, *args], cwd=project, check=True, capture_output=True)


def _sandbox(root: Path) -> dict[str, Path]:
    dirs = {name: root / name for name in ("project", "config", "data", "home", "outside")}
    for path in dirs.values():
        path.mkdir()
    project = dirs["project"]
    (project / "src").mkdir()
    (project / "README.md").write_text("# fuzz\n\nA project for the fuzzer.\n")
    (project / "src" / "main.py").write_text("print('hello')\n")
    (project / "opencode.json").write_text(
        json.dumps(
            {
                "mcp": {
                    "fz": {"type": "local", "command": [sys.executable, str(ROOT / "tests/mcp_server.py"), "stdio"]}
                },
                "command": {"hello": {"template": "say hello $ARGUMENTS", "description": "a project command"}},
            }
        )
    )
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "initial")
    (project / "src" / "main.py").write_text("print('hello, fuzz')\n")  # something for the diff routes
    return dirs


def _server_env(dirs: dict[str, Path]) -> dict[str, str]:
    env = {name: os.environ[name] for name in _KEPT_ENV if name in os.environ}
    home = str(dirs["home"])
    env.update(
        HOME=home,
        XDG_CONFIG_HOME=f"{home}/.config",
        XDG_DATA_HOME=f"{home}/.local/share",
        XDG_STATE_HOME=f"{home}/.local/state",
        XDG_CACHE_HOME=f"{home}/.cache",
        OPENSESSION_CONFIG_DIR=str(dirs["config"]),
        OPENSESSION_DATA_DIR=str(dirs["data"]),
        # Clients that honour proxy variables (httpx) reach nothing outside this machine.
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        ALL_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
    )
    return env


def _start_server(db: str, dirs: dict[str, Path], port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--db", db]
    command += ["--directory", str(dirs["project"])]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=_server_env(dirs), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited at start ({process.returncode}):\n{log.read_text()}")
        if _answers(f"http://127.0.0.1:{port}"):
            return process
        time.sleep(0.2)
    _stop_server(process)
    raise RuntimeError(f"the server did not answer within 60 s:\n{log.read_text()}")


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/global/health", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def _stop_server(process: subprocess.Popen[bytes]) -> None:
    """The server and everything it started (terminals, MCP servers, shells): its process group."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            os.killpg(process.pid, signal.SIGKILL)  # whatever of the group outlived the server
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


# --------------------------------------------------------------------------------------- seeding


def _seed(url: str, dirs: dict[str, Path]) -> dict[str, Any]:
    """Objects the generated requests can name, and the sandbox the hooks keep them in."""
    import httpx

    with httpx.Client(base_url=url, headers=JSON, timeout=30) as client:

        def call(method: str, path: str, body: Any = None) -> Any:
            response = client.request(method, path, json=body)
            response.raise_for_status()
            return response.json() if response.content else None

        ask = [{"permission": "bash", "pattern": "*", "action": "ask"}]
        bash = 'TOOL:bash {"command": "echo hi", "description": "say hi"}'
        question = 'TOOL:question {"questions": [{"question": "Which?", "header": "Pick", "options": ['
        question += '{"label": "a", "description": "A"}, {"label": "b", "description": "B"}]}]}'

        def session(*prompts: str, permission: Any = None, wait: bool = True) -> list[dict[str, str]]:
            """One context per part of the new session's messages (just the session without any)."""
            body: dict[str, Any] = {"title": "fuzz", **({"permission": permission} if permission else {})}
            sid = call("POST", "/session", body)["id"]
            for text in prompts:
                prompt = {"parts": [{"type": "text", "text": text}]}
                call("POST", f"/session/{sid}/{'message' if wait else 'prompt_async'}", prompt)
            parts = [p for m in call("GET", f"/session/{sid}/message") for p in m["parts"]]
            return [{"sessionID": sid, "messageID": p["messageID"], "partID": p["id"]} for p in parts] or [
                {"sessionID": sid}
            ]

        def pending(path: str, sid: str) -> dict[str, str]:
            """The permission or question the session waits for."""
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if found := [item["id"] for item in call("GET", path) if item["sessionID"] == sid]:
                    return {"sessionID": sid, "requestID": found[0], "permissionID": found[0]}
                time.sleep(0.05)
            raise RuntimeError(f"no {path} request for {sid}")

        keep = session("hello", "REASON and more") + session("second session")
        shared = [keep[0]["sessionID"], session("shared, then unshared")[0]["sessionID"]]
        for sid in shared:
            call("POST", f"/session/{sid}/share")
        token = call("GET", f"/session/{shared[0]}")["share"]["url"].rsplit("/", 1)[1]
        # Deleted by the DELETEs (sessions, messages, parts, a share), which leave the others alone.
        doomed_sessions = session("to be deleted") + session()
        doomed_parts = [{"sessionID": shared[1]}, *session("one", "two", "three"), *session("four", "REASON five")]
        # A saved permission (answered "always"), then permissions and questions left pending.
        saved_sid = session(bash, permission=ask, wait=False)[0]["sessionID"]
        call("POST", f"/permission/{pending('/permission', saved_sid)['requestID']}/reply", {"reply": "always"})
        saved = [item["id"] for item in call("GET", "/api/permission/saved")["data"]]
        printf = bash.replace("echo hi", "printf hi")  # not covered by the saved "echo *"
        permissions = [pending("/permission", session(printf, permission=ask, wait=False)[0]["sessionID"])]
        permissions += [pending("/permission", session(printf, permission=ask, wait=False)[0]["sessionID"])]
        questions = [pending("/question", session(question, wait=False)[0]["sessionID"]) for _ in range(3)]
        ptys = [call("POST", "/pty", {"title": f"fuzz {n}", "command": "cat"})["id"] for n in range(6)]
        call("POST", "/api/integration/deepseek/connect/key", {"key": "not-a-key", "label": "fuzz"})
        credentials = [
            c["id"]
            for i in call("GET", "/api/integration")["data"]
            for c in i.get("connections", [])
            if c.get("type") == "credential"
        ]
        project = call("GET", "/project/current")["id"]
    return {
        "sandbox": str(dirs["project"].parent),
        "outside": str(dirs["outside"]),
        "contexts": keep + permissions + questions,
        "idle_contexts": keep,
        "permission_contexts": permissions,
        "question_contexts": questions,
        "doomed_sessions": doomed_sessions,
        "doomed_parts": doomed_parts,
        "values": {
            "ptyID": ptys[:1],
            "token": [token],
            "projectID": [project, "global"],
            "name": ["fz"],
            "providerID": ["opensession", "deepseek"],
            "integrationID": ["deepseek", "anthropic"],
            "credentialID": credentials,
            "savedID": saved,
            "path": ["README.md", "src/main.py", "src", "."],
        },
        "body_values": {
            "agent": ["build", "plan", "general"],
            "providerID": ["opensession"],
            "modelID": ["echo"],
            "patch": [
                "diff --git a/new.txt b/new.txt\nnew file mode 100644\n"
                "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+fuzz\n"
            ],
            "path": [],  # no body path is seeded (a revert's files are the session's own)
        },
        "commands": ["hello", "init"],
        "doomed_values": {"ptyID": ptys[1:]},
        "prompts": {"permission_contexts": printf, "question_contexts": question},
    }


# ------------------------------------------------------------------------------ the hooks module


_CONTEXT_KEYS = ("sessionID", "messageID", "partID", "requestID", "permissionID")
# Operations that wait for the session's running turn: on a session waiting for a permission or an
# answer they wait as long as it does (as in OpenCode), so they are sent to idle sessions only.
_WAITING = frozenset(
    {
        "/session/{sessionID}/message",
        "/session/{sessionID}/summarize",
        "/session/{sessionID}/init",
        "/session/{sessionID}/command",
        "/api/session/{sessionID}/wait",
        "/api/session/{sessionID}/compact",
    }
)
_DIRECTORY_KEYS = frozenset({"directory", "location[directory]", "cwd"})
_URL = re.compile(r"^https?://[^/]*", re.IGNORECASE)


def _pick(value: Any, pool: list[Any]) -> Any:
    """A seeded value for three generated values in four (fixed by the generated value)."""
    digest = zlib.crc32(repr(value).encode("utf-8", "surrogatepass"))
    if not pool or digest % 4 == 0:
        return value
    return pool[digest // 4 % len(pool)]


def _contexts(seeds: dict[str, Any], method: str, path: str) -> list[dict[str, str]]:
    """The objects (session, message, part, pending request) an operation's ids are taken from."""
    if method == "DELETE":
        return seeds["doomed_sessions" if path == "/session/{sessionID}" else "doomed_parts"]
    if "/question" in path:
        return seeds["question_contexts"]
    if "/permission" in path:
        return seeds["permission_contexts"]
    if method == "POST" and path in _WAITING:
        return seeds["idle_contexts"]
    return seeds["contexts"]


def _choose(contexts: list[dict[str, str]], containers: tuple[Any, ...]) -> dict[str, str] | None:
    """One context for the whole request (so its session, message and part belong together), or
    None to leave the generated ids alone; fixed by the first id the request carries."""
    for container in containers:
        if isinstance(container, MutableMapping):
            for key in _CONTEXT_KEYS:
                if key in container:
                    chosen = _pick(container[key], contexts)
                    return chosen if isinstance(chosen, dict) else None
    return None


def _use_seeds(container: Any, context: dict[str, str] | None, values: dict[str, list[Any]]) -> None:
    """Seeded ids in ``container`` (path parameters, query, or a body and every object in it)."""
    if isinstance(container, list):
        for item in container:
            _use_seeds(item, context, values)
    if not isinstance(container, MutableMapping):
        return
    if "providerID" in container and "id" in container:  # a V2 model reference
        values = {**values, "id": values["modelID"]}
    for key, value in container.items():
        if isinstance(value, MutableMapping | list):
            _use_seeds(value, context, values)
        elif key in _CONTEXT_KEYS:
            if context is not None and key in context and _pick(value, [True]) is True:
                container[key] = context[key]
        elif key in values:
            container[key] = _pick(value, values[key])


def _confined(value: Any, seeds: dict[str, Any]) -> Any:
    """A path the server may act in: inside the sandbox, else moved under ``sandbox/outside``."""
    if not isinstance(value, str) or not (value.startswith(("/", "~")) or ".." in value):
        return value
    try:
        inside = os.path.realpath(value).startswith(seeds["sandbox"] + os.sep) and ".." not in value
    except (ValueError, OSError):  # a NUL byte: the server refuses it, as the fuzzer wants to see
        inside = False
    if inside:
        return value
    return os.path.join(seeds["outside"], value.lstrip("/~").replace("..", "__"))


def _confine(container: Any, seeds: dict[str, Any]) -> Any:
    if isinstance(container, MutableMapping):
        for key, value in container.items():
            if key.lower() in _DIRECTORY_KEYS or key.lower() == "x-opencode-directory":
                container[key] = _confined(value, seeds)
            elif isinstance(value, str) and key.lower().endswith("url"):
                container[key] = _URL.sub("http://127.0.0.1:9", value)
            else:
                _confine(value, seeds)
    elif isinstance(container, list):
        for item in container:
            _confine(item, seeds)
    return container


class _Pending:
    """Keeps a permission and a question pending in their sessions: once the fuzzer answers one
    (or a dispose drops it), the session is prompted again and its context names the new one."""

    def __init__(self, seeds: dict[str, Any]) -> None:
        import httpx

        self.client = httpx.Client(base_url=seeds["url"], headers=JSON, timeout=30)
        self.seeds = seeds
        self.asked: dict[str, float] = {}

    def refresh(self) -> None:
        for kind, path in (("permission_contexts", "/permission"), ("question_contexts", "/question")):
            pending = {item["sessionID"]: item["id"] for item in self.client.get(path).json()}
            for context in self.seeds[kind]:
                sid = context["sessionID"]
                if sid in pending:
                    context["requestID"] = context["permissionID"] = pending[sid]
                elif time.monotonic() - self.asked.get(sid, 0) > 2:
                    self.asked[sid] = time.monotonic()
                    prompt = {"parts": [{"type": "text", "text": self.seeds["prompts"][kind]}]}
                    self.client.post(f"/session/{sid}/prompt_async", json=prompt)


def _register_hooks() -> None:
    import atexit
    from collections import Counter, defaultdict

    import schemathesis

    seeds = json.loads(os.environ[SEEDS_ENV])
    pending = _Pending(seeds)
    waiting = {c["sessionID"] for c in seeds["permission_contexts"] + seeds["question_contexts"]}
    statuses: defaultdict[str, Counter[int]] = defaultdict(Counter)
    samples: defaultdict[str, set[str]] = defaultdict(set)  # a few refusals of each operation
    atexit.register(
        lambda: Path(seeds["stats"]).write_text(
            json.dumps({"statuses": statuses, "samples": {op: sorted(texts) for op, texts in samples.items()}})
        )
    )

    @schemathesis.hook
    def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
        method, path = case.method.upper(), case.operation.path
        if "/permission" in path or "/question" in path:
            pending.refresh()
        values = {**seeds["values"], **(seeds["doomed_values"] if method == "DELETE" else {})}
        chosen = _choose(_contexts(seeds, method, path), (case.path_parameters, case.query, case.body))
        _use_seeds(case.path_parameters, chosen, values)
        if method == "POST" and path in _WAITING and case.path_parameters.get("sessionID") in waiting:
            # A waiting session named by a stateful link (the seeds choose idle ones already).
            case.path_parameters["sessionID"] = _pick(None, seeds["idle_contexts"])["sessionID"]
        _use_seeds(case.query, chosen, values)
        body = {**values, **seeds["body_values"]}
        if path == "/session/{sessionID}/command":
            body.update(command=seeds["commands"], model=["opensession/echo"])
        _use_seeds(case.body, chosen, body)
        if path.endswith("/part/{partID}") and isinstance(case.body, MutableMapping) and "id" in case.body:
            case.body["id"] = _pick(case.body["id"], [case.path_parameters.get("partID")])
        for container in (case.query, case.headers, case.body):
            _confine(container, seeds)
        if path.endswith("/connect-token") and isinstance(case.headers, MutableMapping):
            # The header a client asks for a ticket with, in three cases in four.
            case.headers.setdefault("x-opencode-ticket", "1" if _pick(case.path_parameters, ["1"]) == "1" else "0")

    @schemathesis.hook
    def after_call(context: Any, case: Any, response: Any) -> None:
        if case.method.upper() != case.operation.method.upper():
            return  # a probe of a method the route does not take (405)
        operation = f"{case.method.upper()} {case.operation.path}"
        statuses[operation][response.status_code] += 1
        if response.status_code >= 400 and len(samples[operation]) < 5:
            samples[operation].add(f"{response.status_code} {response.text[:300]}")


# ------------------------------------------------------------------------------------------ main


def _traceback_lines(log: Path) -> list[str]:
    text = log.read_text(errors="replace")
    markers = (
        "Traceback (most recent call last)",
        "unexpected error",
        "Exception in ASGI",
        "exception was never retrieved",
    )
    return [line for line in text.splitlines() if any(marker in line for marker in markers)]


def _summarize(name: str, stats: list[Path], verbose: bool) -> None:
    statuses: dict[str, dict[str, int]] = {}
    samples: dict[str, list[str]] = {}
    for path in stats:
        data = json.loads(path.read_text())
        statuses.update(data["statuses"])
        samples.update(data["samples"])
    total = sum(sum(counts.values()) for counts in statuses.values())
    succeeded = [op for op, counts in statuses.items() if any(code.startswith("2") for code in counts)]
    errors = {op: counts for op, counts in statuses.items() if any(code.startswith("5") for code in counts)}
    print(f"== {name}: {total} requests to {len(statuses)} operations, {len(succeeded)} answered 2xx at least once")
    for op, counts in sorted(errors.items()):
        print(f"   5xx from {op}: {counts}")
    for op in sorted(set(statuses) - set(succeeded)):
        print(f"   never 2xx: {op} {dict(sorted(statuses[op].items()))}")
        for sample in samples.get(op, [])[:3] if verbose else ():
            print(f"      {sample[:200]!r}")


def _run_one(name: str, db: str, args: argparse.Namespace, extra: list[str], root: Path) -> tuple[int, list[str]]:
    from tests.servers import free_port

    dirs = _sandbox(root)
    port = free_port()
    log = root / "server.log"
    url = f"http://127.0.0.1:{port}"
    process = _start_server(db, dirs, port, log)
    started = time.monotonic()
    try:
        seeds = {**_seed(url, dirs), "url": url}
        config = root / "schemathesis.toml"
        # One event of an event stream is enough to see its status; the default waits for 10.
        config.write_text(f"max-stream-events = 1\nrequest-timeout = {args.request_timeout}\n")
        checks = "not_a_server_error" + (",response_schema_conformance" if args.conformance else "")
        command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "run"]
        command += [f"{url}/doc", "--checks", checks, "--max-examples", str(args.max_examples)]
        command += ["--workers", str(args.workers), "--no-color", "--generation-database", "none"]
        if args.seed is not None:
            command += ["--seed", str(args.seed)]
        # The dispose routes end every directory's terminals and pending requests, which the other
        # operations are seeded with: they get a short run of their own at the end.
        disposes = ["--include-path", "/global/dispose", "--include-path", "/instance/dispose"]
        runs = [("all", ["--max-time", str(args.max_time), *extra])]
        if not extra:
            runs[0][1].extend(arg.replace("--include", "--exclude") for arg in disposes)
            runs.append(("dispose", ["--max-time", str(max(5, args.max_time // 20)), *disposes]))
        code = 0
        for label, options in runs:
            report = ["--report", "junit", "--report-dir", str(root / f"report-{label}")]
            env = {**os.environ, "SCHEMATHESIS_HOOKS": str(Path(__file__).resolve())}
            env[SEEDS_ENV] = json.dumps({**seeds, "stats": str(root / f"statuses-{label}.json")})
            for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
                env.pop(key, None)
            print(f"== {name}: {' '.join([*command[1:], *report, *options])}", flush=True)
            returncode = subprocess.run([*command, *report, *options], cwd=root, env=env, check=False).returncode
            code = code or returncode
        alive = process.poll() is None
        answering = alive and _answers(url)
    finally:
        _stop_server(process)
    elapsed = time.monotonic() - started
    problems = _traceback_lines(log)
    _summarize(name, sorted(root.glob("statuses-*.json")), args.verbose)
    if not alive:
        problems.append(f"the server died during the run (exit status {process.returncode})")
    elif not answering:
        problems.append("the server no longer answers GET /global/health")
    print(f"== {name}: schemathesis exit {code}, {elapsed:.0f} s, {len(problems)} error lines in {log}")
    for line in problems[:40]:
        print(f"   {line}")
    return code, problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], usage="%(prog)s [options] [-- schemathesis options]"
    )
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--postgres-url", help="an existing server (postgresql://user@host:port) instead of a throwaway one"
    )
    parser.add_argument("--max-examples", type=int, default=25, help="test cases per operation and phase (default 25)")
    parser.add_argument("--max-time", type=int, default=300, help="seconds of fuzzing per database (default 300)")
    parser.add_argument("--workers", type=int, default=1, help="concurrent schemathesis workers (default 1)")
    parser.add_argument("--request-timeout", type=float, default=20.0, help="seconds per request (default 20)")
    parser.add_argument("--seed", type=int, help="schemathesis' random seed, to repeat a run")
    parser.add_argument("--conformance", action="store_true", help="also check answers against the response schemas")
    parser.add_argument("--verbose", action="store_true", help="show refusals of operations never answered 2xx")
    parser.add_argument("--keep", action="store_true", help="keep the sandboxes (server logs, reports)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if shutil.which("schemathesis", path=str(Path(sys.executable).parent)) is None:
        print("schemathesis is not installed here: .venv/bin/pip install schemathesis", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    failed = False
    for name in ("sqlite", "postgres") if args.db == "both" else (args.db,):
        root = Path(tempfile.mkdtemp(prefix=f"opensession-fuzz-{name}-"))
        cluster = None
        try:
            if name == "sqlite":
                db = str(root / "opensession.db")
            else:
                from tests.postgres import Cluster, start_cluster

                cluster = Cluster(args.postgres_url.rstrip("/")) if args.postgres_url else start_cluster()
                if cluster is None:
                    print("PostgreSQL is not installed here (apt-get install postgresql): skipped", file=sys.stderr)
                    failed = True
                    continue
                db = cluster.create_database()
            code, problems = _run_one(name, db, args, extra, root)
            failed = failed or code != 0 or bool(problems)
        finally:
            if cluster is not None:
                cluster.stop()
            if args.keep:
                print(f"== {name}: sandbox kept in {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
elif os.environ.get(SEEDS_ENV):  # loaded by schemathesis as its hooks module
    _register_hooks()
