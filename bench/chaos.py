"""Chaos probe: prompts and event streams through nginx while processes and PostgreSQL fail.

Server processes on one PostgreSQL database behind the shipped nginx configuration, clients
prompting through it (legacy ``prompt_async``, V2 prompts and synchronous prompts), a user
aborting turns and forking sessions, and two users having the model write a file then undoing
and redoing the turn, a user making and removing worktrees, and one changing the provider's key
and an MCP server added at run time, while processes are killed
(``kill -9``) or stopped (SIGTERM) and started again at random, and with ``--pg`` PostgreSQL
itself is restarted.

It is a soak test more than a benchmark: the figures it prints are counts, and what it reports is
whether anything a client was promised broke. Every prompt answered 204 must be stored once and
answered once (a reply cut off by a death is closed with an error and the prompt answered again);
a prompt answered 5xx or lost with its connection may or may not be stored, but never twice; no
reply stays open (an abort may leave a prompt unanswered, never a V2 prompt not yet taken into a
turn: the probe prompts the aborted sessions once more at the end, and those must then be
answered); a fork holds prompts of its source whose ids sort before the message it was forked at
(all, when forked whole), in the source's order; a turn whose tool completed left its file written,
an answered revert put the file back as it was before the turn, an answered unrevert as the turn
left it; every session reads idle at the end; each session's V2 event stream, followed through
nginx and resumed with ``Last-Event-ID`` after each break, delivers ``seq`` 1 to the session's
last, in order, each once; the legacy ``/event`` stream's durable frames arrive in ascending id
order; a worktree create sent again with its Idempotency-Key until answered made one worktree,
filled and listed (or, once its removal was answered, none), and nothing else is left in the
project's worktrees, branches or data directory; every process, asked directly at the end,
has the key and the MCP server's status the last answered change left (or one sent after it);
and no request gets a 500. The exit status is
1 when something broke.

Everything runs on 127.0.0.1 (a throw-away PostgreSQL cluster from the system's binaries, nginx,
the processes) and is removed on exit; the loops end after ``--seconds``. From the repository
root::

    python bench/chaos.py [--seconds 60] [--processes 3] [--pg] [--seed 1] [--pause 2,5] [--rtt-ms 1] [--keep DIR]

``--rtt-ms`` puts ``bench/delay_proxy.py`` between the processes and PostgreSQL (a database on
another machine): timing windows that loopback keeps too narrow to hit open up. ``--keep DIR``
saves, when something broke, each session's history as the server returns it and the servers'
logs, which the throw-away directory would otherwise take with it.

The problems it found are fixed (bench/README.md, "Chaos probe").
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # ``tests`` starts the cluster, the processes and nginx

from cluster import DelayedLink  # noqa: E402  (beside this script)
from worktree_kills import worktree_problems  # noqa: E402

from tests.balancer import nginx_binary, shipped_nginx  # noqa: E402
from tests.helpers import git_repository, text_prompt  # noqa: E402
from tests.postgres import Cluster, start_cluster  # noqa: E402
from tests.servers import ProcessServer, process_server, start_together  # noqa: E402

SESSIONS = 12
CLIENTS = 4
# The first sessions are also aborted now and then: their prompts may go unanswered (an abort
# drops the prompts queued behind the turn it stops), so the others keep the strict check.
ABORTED_SESSIONS = 4
# What the clients ask the built-in echo model: quick and slower replies, and a turn of two steps.
PROMPTS = ("quick", "SLOW:0.05 hello", "SLOW:0.2 a slower answer", "TOOL:bash echo hi")
DURABLE_FRAMES = ("message.updated", "message.part.updated", "message.removed", "session.created")
# Sessions of their own where a user has the model write a file, then undoes the turn (and
# sometimes redoes it): the file must read as it did before the turn, then as the turn left it.
# Each works in a folder of its own: a step's snapshots cover its session's directory, so a turn
# of one session there would also undo what another wrote there meanwhile (as in OpenCode).
REVERTED_SESSIONS = 2
RETRIES = 60  # how often a client sends a worktree request again before it gives up
SETTLE_S = 90.0  # how long the sessions may take to go idle once the chaos is over
WORKTREE_SWEEP_S = 12.0  # two sweeps of every process (app/runtime/worktrees/_fills.py)
STOP_WAIT_S = 30.0  # a SIGTERMed process ends well within (its graceful time is 5 s)


@dataclass
class Record:
    """What the clients saw, shared by their threads (list appends and counter updates only)."""

    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    admitted: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))
    unsure: set[str] = field(default_factory=set)  # answered 5xx or cut off: stored at most once
    errors: list[str] = field(default_factory=list)  # 500s: a bug whatever the chaos
    seqs: dict[str, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    durable_ids: list[int] = field(default_factory=list)
    routes: dict[str, str] = field(default_factory=dict)  # prompt text -> the route it went by
    sent_at: dict[str, float] = field(default_factory=dict)  # prompt text -> when its POST began
    # session -> when each abort sent to it was answered (inf: it may have taken effect any time)
    aborts: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    forks: list[tuple[str, str | None, str]] = field(default_factory=list)  # (source, up to, fork)
    undo_problems: list[str] = field(default_factory=list)  # files an answered revert left wrong
    worktrees: dict[str, set[str]] = field(default_factory=lambda: collections.defaultdict(set))  # key -> answers
    removed: set[str] = field(default_factory=set)  # worktrees whose removal was answered 200
    # What every process must agree on once the chaos is over (the provider key's label, the MCP
    # server's status): the values it may have, the last answered change's, or any sent after it.
    settled: dict[str, set[str]] = field(default_factory=dict)
    hangs: list[str] = field(default_factory=list)  # processes that did not end after SIGTERM


V2_ROUTE = "/api/session/{}/prompt"
# How a client sends a prompt: (route, the body for a text, the status that means admitted).
ROUTES: tuple[tuple[str, Callable[[str], dict[str, Any]], int], ...] = (
    ("/session/{}/prompt_async", text_prompt, 204),
    ("/session/{}/prompt_async", text_prompt, 204),
    (V2_ROUTE, lambda text: {"prompt": {"text": text}}, 200),
    ("/session/{}/message", text_prompt, 200),  # waits for the reply
)


def _client(
    url: str, sessions: list[str], record: Record, rng: random.Random, name: str, stop: threading.Event
) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        sent = 0
        while not stop.is_set():
            sid, sent = rng.choice(sessions), sent + 1
            text = f"{rng.choice(PROMPTS)} {name}-{sent}"
            route, body, admitted = rng.choice(ROUTES)
            record.routes[text], record.sent_at[text] = route, time.monotonic()
            try:
                answer = http.post(route.format(sid), json=body(text))
            except httpx.HTTPError:
                record.counts["prompt cut off"] += 1
                record.unsure.add(text)
                continue
            record.counts[f"prompt {answer.status_code}"] += 1
            if answer.status_code == admitted:
                record.admitted[sid].append(text)
            else:
                record.unsure.add(text)
                if answer.status_code == 500:
                    record.errors.append(f"POST {route}: {answer.text[:300]}")
            try:
                read = http.get(f"/session/{sid}/message", params={"limit": 5})
                record.counts[f"read {read.status_code}"] += 1
                if read.status_code == 500:
                    record.errors.append(f"GET message: {read.text[:300]}")
            except httpx.HTTPError:
                record.counts["read cut off"] += 1
            time.sleep(rng.uniform(0.02, 0.15))


def _operator(url: str, sessions: list[str], record: Record, rng: random.Random, stop: threading.Event) -> None:
    """What a user does besides prompting: abort a turn (in the first ``ABORTED_SESSIONS``
    sessions), fork a session whole or up to one of its recent messages."""
    with httpx.Client(base_url=url, timeout=60) as http:
        while not stop.wait(rng.uniform(0.2, 0.8)):
            if rng.random() < 0.5:
                sid = rng.choice(sessions[:ABORTED_SESSIONS])
                try:
                    answer = http.post(f"/session/{sid}/abort")
                except httpx.HTTPError:
                    record.counts["abort cut off"] += 1
                    record.aborts[sid].append(float("inf"))
                    continue
                record.counts[f"abort {answer.status_code}"] += 1
                record.aborts[sid].append(time.monotonic() if answer.status_code == 200 else float("inf"))
                if answer.status_code == 500:
                    record.errors.append(f"POST abort: {answer.text[:300]}")
                continue
            sid, up_to = rng.choice(sessions), None
            try:
                if rng.random() < 0.5:
                    recent = http.get(f"/session/{sid}/message", params={"limit": 4})
                    if recent.status_code == 200 and recent.json():
                        up_to = rng.choice(recent.json())["info"]["id"]
                answer = http.post(f"/session/{sid}/fork", json={"messageID": up_to} if up_to else {})
            except httpx.HTTPError:
                record.counts["fork cut off"] += 1
                continue
            record.counts[f"fork {answer.status_code}"] += 1
            if answer.status_code == 200:
                record.forks.append((sid, up_to, answer.json()["id"]))
            elif answer.status_code == 500:
                record.errors.append(f"POST fork: {answer.text[:300]}")


def _undoer(url: str, session_id: str, directory: Path, record: Record, stop: threading.Event) -> None:
    """Turns that write a file, each undone (``revert``) and every other one redone
    (``unrevert``); the next turn commits an undo left in place. Only what was answered is
    judged: after an operation cut off or answered 5xx, or a turn whose tool did not complete (its
    process died), the round ends and the next waits for the session to be idle, so a turn still
    queued cannot write behind it."""
    name = "undo.txt"

    def content() -> str | None:
        return (directory / name).read_text() if (directory / name).exists() else None

    def wrong(what: str) -> None:
        record.undo_problems.append(f"{directory.name}: {what}")

    with httpx.Client(base_url=url, timeout=60) as http:
        settled = True
        for turn in itertools.count(1):
            if stop.wait(0.05):
                return
            try:
                if not settled:
                    settled = _idle(http, session_id, stop)
                    continue
                settled = False  # until this round ends as it should
                before = content()
                reply = http.post(f"/session/{session_id}/message", json=text_prompt(f"TOOL:bash echo {turn} > {name}"))
                record.counts[f"undo turn {reply.status_code}"] += 1
                if reply.status_code != 200 or not _tool_completed(http, session_id, reply.json()["info"]["parentID"]):
                    continue
                if (after := content()) != f"{turn}\n":
                    wrong(f"turn {turn}'s tool completed, the file reads {after!r}")
                    continue
                undo = http.post(f"/session/{session_id}/revert", json={"messageID": reply.json()["info"]["parentID"]})
                record.counts[f"revert {undo.status_code}"] += 1
                if undo.status_code != 200:
                    continue
                if (now := content()) != before:
                    wrong(f"reverted turn {turn}, it reads {now!r}, not {before!r}")
                if turn % 2:
                    redo = http.post(f"/session/{session_id}/unrevert")
                    record.counts[f"unrevert {redo.status_code}"] += 1
                    if redo.status_code != 200:
                        continue
                    if (now := content()) != after:
                        wrong(f"unreverted turn {turn}, it reads {now!r}, not {after!r}")
                settled = True
            except httpx.HTTPError:
                record.counts["undo cut off"] += 1


def _until_answered(
    http: httpx.Client, record: Record, what: str, method: str, body: dict[str, str], key: str | None = None
) -> Any:
    """``method /experimental/worktree`` with ``body`` (and Idempotency-Key ``key``) sent again
    until it is answered 200 (its answer's JSON), or None after a 4xx or ``RETRIES`` tries: what a
    client whose request hit a death or a restart does."""
    headers = {"Idempotency-Key": key} if key else {}
    for _ in range(RETRIES):
        try:
            answer = http.request(method, "/experimental/worktree", json=body, headers=headers)
        except httpx.HTTPError:
            record.counts[f"{what} cut off"] += 1
            time.sleep(0.2)
            continue
        record.counts[f"{what} {answer.status_code}"] += 1
        if answer.status_code == 200:
            return answer.json()
        if answer.status_code == 500:
            record.errors.append(f"{what}: {answer.text[:300]}")
        if answer.status_code < 500:
            return None
        time.sleep(0.2)
    return None


def _builder(url: str, record: Record, rng: random.Random, stop: threading.Event) -> None:
    """Worktrees made with an Idempotency-Key, each sent again until answered (and now and then
    once more after), and removed now and then."""
    with httpx.Client(base_url=url, timeout=60) as http:
        made = 0
        while not stop.wait(rng.uniform(0.1, 0.6)):
            made += 1
            key = f"tree-{made}"
            for _ in range(2 if rng.random() < 0.3 else 1):
                answer = _until_answered(http, record, "worktree create", "POST", {"name": key}, key)
                if answer is not None:
                    record.worktrees[key].add(answer["directory"])
            if record.worktrees[key] and rng.random() < 0.3:
                directory = sorted(record.worktrees[key])[0]
                if _until_answered(http, record, "worktree remove", "DELETE", {"directory": directory}) is not None:
                    record.removed.add(directory)


MCP_SERVER = ROOT / "tests" / "mcp_server.py"


def _configurer(url: str, record: Record, rng: random.Random, stop: threading.Event) -> None:
    """A user changing what every process must then offer alike: the provider's key (connected
    under a label naming it) and an MCP server added at run time, then switched off and on."""
    mcp = {"type": "local", "command": [sys.executable, str(MCP_SERVER), "stdio", "chaos"]}

    def change(what: str, value: str, method: str, path: str, body: Any, ok: int) -> None:
        try:
            answer = http.request(method, path, json=body)
        except httpx.HTTPError:
            record.counts[f"{what} cut off"] += 1
            record.settled.setdefault(what, set()).add(value)  # may have been made
            return
        record.counts[f"{what} {answer.status_code}"] += 1
        if answer.status_code == ok:
            record.settled[what] = {value}
        elif answer.status_code >= 500:
            if answer.status_code == 500:
                record.errors.append(f"{method} {path}: {answer.text[:300]}")
            record.settled.setdefault(what, set()).add(value)

    with httpx.Client(base_url=url, timeout=60) as http:
        changes = 0
        while not stop.wait(rng.uniform(0.3, 1.2)):
            changes += 1
            if "mcp" not in record.settled:
                change("mcp", "connected", "POST", "/mcp", {"name": "chaos", "config": mcp}, 200)
            elif rng.random() < 0.5:
                label = f"key-{changes}"
                body = {"key": f"sk-{changes}", "label": label}
                change("key", label, "POST", "/api/integration/deepseek/connect/key", body, 204)
            else:
                on = rng.random() < 0.5
                path = f"/mcp/chaos/{'connect' if on else 'disconnect'}"
                change("mcp", "connected" if on else "disabled", "POST", path, None, 200)


def _agreement_problems(servers: list[ProcessServer], record: Record) -> list[str]:
    """Each process, asked directly, offers what the configurer's changes left (``settled``)."""
    problems = []
    for server in servers:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            connections = http.get("/api/integration/deepseek").json()["data"]["connections"]
            seen = {"key": next((c["label"] for c in connections if c["type"] == "credential"), "none")}
            seen["mcp"] = (http.get("/mcp").json().get("chaos") or {}).get("status", "none")
        for what, value in seen.items():
            if what in record.settled and value not in record.settled[what]:
                problems.append(f"{server.url} has {what} {value}, expected one of {sorted(record.settled[what])}")
    return problems


def _idle(http: httpx.Client, session_id: str, stop: threading.Event) -> bool:
    """Whether the session reads idle (on every process: the status is the cluster's)."""
    status = http.get("/session/status")
    return status.status_code == 200 and session_id not in status.json() and not stop.wait(0.2)


def _tool_completed(http: httpx.Client, session_id: str, user_id: str) -> bool:
    """Whether the turn answering ``user_id`` ran its tool to the end (unknown, so no, while the
    history cannot be read: a 503 during a database restart)."""
    history = http.get(f"/session/{session_id}/message")
    if history.status_code != 200:
        return False
    parts = [p for m in history.json() if m["info"].get("parentID") == user_id for p in m["parts"]]
    return any(p["type"] == "tool" and p["state"]["status"] == "completed" for p in parts)


def _follow(url: str, path: str, take: Callable[[int, str], None], record: Record, stop: threading.Event) -> None:
    """Read an SSE stream through nginx, resuming with Last-Event-ID after every break, until
    ``stop``; ``take(id, type)`` gets each frame that has an id."""
    last: int | None = None
    while not stop.is_set():
        headers = {} if last is None else {"Last-Event-ID": str(last)}
        try:
            with (
                httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=5)) as http,
                http.stream("GET", path, headers=headers) as response,
            ):
                if response.status_code != 200:
                    record.counts[f"stream {response.status_code}"] += 1
                    time.sleep(0.2)
                    continue
                frame_id: int | None = None
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        frame_id = last = int(line[3:])
                    elif line.startswith("data:") and frame_id is not None:
                        take(frame_id, json.loads(line[5:]).get("type", ""))
                        frame_id = None
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            record.counts["stream reconnect"] += 1
            time.sleep(0.1)


def _chaos(
    servers: list[ProcessServer],
    cluster: Cluster,
    options: argparse.Namespace,
    record: Record,
    rng: random.Random,
) -> None:
    seconds, pg, pause = options.seconds, options.pg, options.pause
    kinds = ["kill -9", "SIGTERM"] * 2 + (["PostgreSQL restart"] if pg else [])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(*pause))
        kind = rng.choice(kinds)
        record.counts[kind] += 1
        if kind == "PostgreSQL restart":
            cluster.halt()
            time.sleep(rng.uniform(0.5, 3))
            cluster.resume()
            continue
        victim = rng.choice(servers)
        assert victim.proc is not None
        if kind == "kill -9":
            victim.kill9()
        else:
            victim.proc.terminate()
            try:
                victim.proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:  # a problem of its own: say where it waits, go on
                last = "\n".join(victim.log.read_text(errors="replace").splitlines()[-40:])
                stacks = _stacks(victim)
                record.hangs.append(f"{victim.url} still running {STOP_WAIT_S:g} s after SIGTERM:\n{stacks}\n{last}")
                victim.kill9()
        time.sleep(rng.uniform(0.2, 2))
        victim.start()


def _stacks(server: ProcessServer) -> str:
    """The process's Python stacks (every thread and task's frame), by py-spy when it is installed."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists() or server.proc is None:
        return "(py-spy is not installed: no stacks)"
    dump = subprocess.run([str(spy), "dump", "--pid", str(server.proc.pid)], capture_output=True, text=True, timeout=60)
    return dump.stdout or dump.stderr


def _problems(http: httpx.Client, sessions: list[str], record: Record) -> list[str]:
    problems = [f"500: {error}" for error in record.errors]
    histories: dict[str, list[dict[str, Any]]] = {}
    for sid in sessions:
        history = http.get(f"/session/{sid}/message").json()
        users = {
            m["info"]["id"]: "".join(p.get("text", "") for p in m["parts"])
            for m in history
            if m["info"]["role"] == "user"
        }
        stored = list(users.values())
        for text in record.admitted[sid]:
            if stored.count(text) != 1:
                aborted = any(at > record.sent_at.get(text, 0.0) for at in record.aborts[sid])
                problems.append(
                    f"{sid}: {text!r}, admitted by {record.routes.get(text)}, is stored {stored.count(text)}"
                    f" times{' (an abort followed)' if aborted else ''}"
                )
        for text in set(stored) - set(record.admitted[sid]):
            if text not in record.unsure or stored.count(text) > 1:
                problems.append(f"{sid}: {text!r} is stored {stored.count(text)} times, never admitted")
        histories[sid] = history
        replies = [m["info"] for m in history if m["info"]["role"] == "assistant"]
        answered = collections.Counter(r.get("parentID") for r in replies if "error" not in r)
        order = list(users)
        for index, (user_id, text) in enumerate(users.items()):
            steps = 2 if text.startswith("TOOL:") else 1  # the tool step, then the answer
            # V2 prompts queued together are answered in one turn, replying to the last of them.
            batched = record.routes.get(text) == V2_ROUTE and any(answered[u] for u in order[index + 1 :])
            # An abort answered after the prompt was sent may have dropped it, or ended its reply.
            dropped = any(at > record.sent_at.get(text, 0.0) for at in record.aborts[sid])
            if not (1 <= answered[user_id] <= steps or (not answered[user_id] and (batched or dropped))):
                failed = [r.get("error", {}).get("name") for r in replies if r.get("parentID") == user_id]
                problems.append(
                    f"{sid}: {text!r} ({record.routes.get(text)}) has {answered[user_id]} replies without"
                    f" an error, and {failed} with one"
                )
        problems += [f"{sid}: reply {r['id']} left open" for r in replies if "completed" not in r["time"]]
        last, after = 0, 0
        while True:
            page = http.get(f"/api/session/{sid}/history", params={"after": after, "limit": 100}).json()
            if page["data"]:
                after = last = page["data"][-1]["durable"]["seq"]
            if not page["hasMore"]:
                break
        seen = record.seqs[sid]
        if seen != list(range(1, last + 1)):
            at = next((i for i, (a, b) in enumerate(zip(seen, range(1, last + 1), strict=False)) if a != b), len(seen))
            problems.append(
                f"{sid}: its stream's seqs differ from 1..{last} at index {at}: {seen[max(0, at - 2) : at + 4]}"
            )
    problems += _fork_problems(http, histories, record)
    ids = record.durable_ids
    if any(later <= earlier for earlier, later in itertools.pairwise(ids)):
        problems.append("/event: durable frames out of order or repeated")
    return problems


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return ["".join(p.get("text", "") for p in m["parts"]) for m in messages if m["info"]["role"] == "user"]


def _in_order_within(part: list[str], whole: list[str]) -> bool:
    """Whether ``part`` is ``whole`` with some items left out, the rest in the same order."""
    rest = iter(whole)
    return all(item in rest for item in part)


def _fork_problems(http: httpx.Client, histories: dict[str, list[dict[str, Any]]], record: Record) -> list[str]:
    """A fork holds the source's messages whose ids sort before the one it was asked for (all it
    had, when none), in id order, the legacy listing's. Its prompts are those of the source's
    (as the source stands at the end) that were in it when it was forked: the same prompts in the
    same order, less the ones that entered the source later. A prompt admitted on one process can
    enter after one admitted on another with a larger id, so they need not be a prefix."""
    problems = []
    for source, up_to, fork in record.forks:
        answer = http.get(f"/session/{fork}/message")
        if answer.status_code != 200:
            problems.append(f"fork {fork} of {source}: reading it answered {answer.status_code}")
            continue
        history = histories[source]
        cut = history if up_to is None else [m for m in history if m["info"]["id"] < up_to]
        copied = _user_texts(answer.json())
        if not _in_order_within(copied, _user_texts(cut)):
            problems.append(f"fork {fork} of {source} up to {up_to}: its prompts {copied[-3:]} are not the source's")
    return problems


def _followers(url: str, sessions: list[str], record: Record, stop: threading.Event) -> list[threading.Thread]:
    """One V2 stream per session and the legacy ``/event`` stream, each on a thread of its own."""

    def of_session(session_id: str) -> Callable[[int, str], None]:
        return lambda frame_id, _: record.seqs[session_id].append(frame_id)

    def durable(frame_id: int, kind: str) -> None:
        if kind in DURABLE_FRAMES:
            record.durable_ids.append(frame_id)

    streams = [(f"/api/session/{sid}/event?after=0", of_session(sid)) for sid in sessions] + [("/event", durable)]
    return [threading.Thread(target=_follow, args=(url, path, take, record, stop)) for path, take in streams]


def _drive(
    url: str, servers: list[ProcessServer], cluster: Cluster, options: argparse.Namespace, record: Record, project: Path
) -> list[str]:
    """Clients and streams through nginx at ``url`` during the chaos, then the checks."""
    rng = random.Random(options.seed)
    with httpx.Client(base_url=url, timeout=30) as http:
        sessions = [http.post("/session").json()["id"] for _ in range(SESSIONS)]
        folders = [project / f"undo-{n}" for n in range(REVERTED_SESSIONS)]
        for folder in folders:
            folder.mkdir()
        undone = [http.post("/session", params={"directory": str(folder)}).json()["id"] for folder in folders]
        stop_clients, stop_streams = threading.Event(), threading.Event()
        followers = _followers(url, sessions, record, stop_streams)
        for follower in followers:
            follower.start()
        with ThreadPoolExecutor(CLIENTS) as pool:
            clients = [
                pool.submit(_client, url, sessions, record, random.Random(rng.random()), f"c{n}", stop_clients)
                for n in range(CLIENTS)
            ]
            operator = threading.Thread(
                target=_operator, args=(url, sessions, record, random.Random(rng.random()), stop_clients)
            )
            operator.start()
            undoers = [
                threading.Thread(target=_undoer, args=(url, sid, folder, record, stop_clients))
                for sid, folder in zip(undone, folders, strict=True)
            ]
            for undoer in undoers:
                undoer.start()
            builder = threading.Thread(target=_builder, args=(url, record, random.Random(rng.random()), stop_clients))
            builder.start()
            configurer = threading.Thread(
                target=_configurer, args=(url, record, random.Random(rng.random()), stop_clients)
            )
            configurer.start()
            try:
                _chaos(servers, cluster, options, record, rng)
            finally:
                stop_clients.set()
            for done in clients:
                done.result()
            operator.join()
            for undoer in undoers:
                undoer.join()
            builder.join()
            configurer.join()
        for sid in sessions[:ABORTED_SESSIONS]:  # wakes the V2 prompts an abort left parked
            text = f"quick wake {sid}"
            record.routes[text], record.sent_at[text] = ROUTES[0][0], time.monotonic()
            if http.post(f"/session/{sid}/prompt_async", json=text_prompt(text)).status_code == 204:
                record.admitted[sid].append(text)
        deadline = time.monotonic() + SETTLE_S
        while (busy := http.get("/session/status").json()) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # the streams catch up with the last events
        stop_streams.set()
        for follower in followers:
            follower.join(timeout=15)
        busy_left = [f"still busy after {SETTLE_S:g} s: {busy}"] if busy else []
        time.sleep(WORKTREE_SWEEP_S)  # the adds and fills a death cut short are finished by then
        trees = worktree_problems(url, project, record.worktrees, record.removed)
        problems = _problems(http, sessions, record) + record.undo_problems + trees + busy_left
        problems += _agreement_problems(servers, record)  # after the sweep's wait: every refresh is done
        problems += record.hangs
        if problems and options.keep is not None:
            _keep_histories(http, sessions + undone, options.keep)
        return problems


def _keep_histories(http: httpx.Client, sessions: list[str], keep: Path) -> None:
    keep.mkdir(parents=True, exist_ok=True)
    for sid in sessions:
        (keep / f"{sid}.json").write_text(json.dumps(http.get(f"/session/{sid}/message").json(), indent=1))


def _nginx_errors(log: Path, record: Record) -> None:
    """Count what nginx logged about the processes (a refused connection, one closed early), by
    kind: what a 502 came from."""
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if "[error]" in line and (kind := re.search(r"\] \d+#\d+: \*?\d* ?([^(,]+)", line)):
            record.counts[f"nginx: {kind.group(1).strip()}"] += 1


def _explain(errors: list[str], servers: list[ProcessServer]) -> None:
    """Print what the servers logged with each 500's reference (its traceback), to stderr; for a
    500 without one (an exception that got past the error handlers), every traceback uvicorn
    logged for an ASGI application."""
    marks = re.findall(r"err_[0-9a-f]+", " ".join(errors))
    if any("err_" not in error for error in errors):
        marks.append("Exception in ASGI application")
    for mark in marks:
        for server in servers:
            lines = server.log.read_text(errors="replace").splitlines()
            for index, line in enumerate(lines):
                if mark in line:  # its traceback runs up to the next line the logger began
                    end = next((i for i in range(index + 1, len(lines)) if lines[i][:2] == "20"), len(lines))
                    print("\n".join(lines[index:end]), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60, help="how long the chaos lasts (default 60)")
    parser.add_argument("--processes", type=int, default=3, help="server processes (default 3)")
    parser.add_argument("--pg", action="store_true", help="restart PostgreSQL too, now and then")
    parser.add_argument("--seed", type=int, default=1, help="the random choices' seed (default 1)")
    parser.add_argument(
        "--pause",
        type=lambda text: tuple(float(part) for part in text.split(",")),
        default=(2.0, 5.0),
        help="the seconds between two failures, drawn between MIN,MAX (default 2,5)",
    )
    parser.add_argument(
        "--rtt-ms", type=float, default=0.0, help="round trip added to the database link (default none)"
    )
    parser.add_argument("--keep", type=Path, help="where to save histories and logs when something broke")
    options = parser.parse_args(argv)
    nginx = nginx_binary()
    cluster = start_cluster()
    if nginx is None or cluster is None:
        raise SystemExit("needs nginx and PostgreSQL (apt-get install nginx postgresql)")
    record = Record()
    print(f"... {options.processes} processes, {SESSIONS} sessions, {options.seconds:g} s of chaos", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="opensession-chaos-") as tmp:
        base = Path(tmp)
        (base / "project").mkdir()
        # A git work tree: snapshots, which undo restores files from, are taken of git projects;
        # worktrees are made from its first commit.
        (base / "project" / "committed.txt").write_text("from the main tree\n")
        git_repository(base / "project")
        (base / "config").mkdir()
        url = cluster.create_database()
        link = DelayedLink(cluster, options.rtt_ms, base / "link-stats") if options.rtt_ms else None
        if link is not None:
            url = link.url(url)
        servers = [process_server(url, base / "project", base / "config") for _ in range(options.processes)]
        try:
            start_together(*servers)
            netlocs = [urlsplit(server.url).netloc for server in servers]
            with shipped_nginx(nginx, netlocs, base / "nginx") as balancer:
                problems = _drive(balancer.url, servers, cluster, options, record, base / "project")
            _nginx_errors(base / "nginx" / "error.log", record)
            _explain(record.errors, servers)
            if problems and options.keep is not None:
                for server in servers:
                    shutil.copy(server.log, options.keep / server.log.name)
        finally:
            for server in servers:
                server.stop()
            if link is not None:
                link.stop()
            cluster.stop()
    admitted = sum(len(texts) for texts in record.admitted.values())
    print(f"prompts admitted (204): {admitted}; answered 5xx or cut off: {len(record.unsure)}")
    for name, count in sorted(record.counts.items()):
        print(f"{name}: {count}")
    print(f"problems: {len(problems)}")
    for problem in problems[:30]:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
