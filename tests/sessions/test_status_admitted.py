"""A session is busy from the moment its prompt is admitted, before the answer to the request that
admitted it, on every process of a cluster, until the prompt is answered (issue #28).

A client that sends a prompt and then polls the status must never conclude that the work is done
before it started: ``GET /session/status`` (and V2's ``GET /api/session/active``) right after the
204 (the 200) names the session, on the process that took the prompt and on any other process on
the same PostgreSQL database, and names it no more once the reply is complete. Each check repeats
admit-then-status a number of times, because the fault it guards against was a race."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.clock import now_ms
from app.runtime.abort import AbortSignal
from app.runtime.inputs import PromptRequest
from app.runtime.sessions import ClusterTopology, DrainCoordinator, Lease
from app.store import leases
from app.wire import SessionStatus
from tests.helpers import text_prompt
from tests.postgres import Cluster
from tests.servers import ProcessServer, ThreadServer, process_server, start_together

TRIALS = 20
# Slow enough that the reply is still streaming when the status is read (the echo model waits
# this long before each of its deltas), short enough for twenty turns.
HOLD = "SLOW:0.1"


def _legacy_send(http: httpx.Client, url: str, sid: str, text: str) -> None:
    response = http.post(f"{url}/session/{sid}/prompt_async", json=text_prompt(text))
    assert response.status_code == 204, response.text


def _legacy_busy(http: httpx.Client, url: str) -> set[str]:
    statuses = http.get(f"{url}/session/status").json()
    assert all(status["type"] in ("busy", "retry") for status in statuses.values()), statuses
    return set(statuses)


def _v2_send(http: httpx.Client, url: str, sid: str, text: str) -> None:
    response = http.post(f"{url}/api/session/{sid}/prompt", json={"prompt": {"text": text}})
    assert response.status_code == 200, response.text


def _v2_busy(http: httpx.Client, url: str) -> set[str]:
    active = http.get(f"{url}/api/session/active").json()["data"]
    assert all(status == {"type": "running"} for status in active.values()), active
    return set(active)


Send = Callable[[httpx.Client, str, str, str], None]
Busy = Callable[[httpx.Client, str], set[str]]
ROUTES = {"legacy": (_legacy_send, _legacy_busy), "v2": (_v2_send, _v2_busy)}


def _idle_trials(http: httpx.Client, admit_on: str, observe_on: list[str], send: Send, busy: Busy) -> list[str]:
    """Admit a prompt on a new session ``TRIALS`` times, reading the status on each of
    ``observe_on`` right after each admission; returns the trials some process called idle.
    Then waits (bounded) until every one of them is idle again everywhere."""
    failures: list[str] = []
    sids: list[str] = []
    for trial in range(TRIALS):
        sid = http.post(f"{admit_on}/session").json()["id"]
        sids.append(sid)
        send(http, admit_on, sid, f"{HOLD} trial {trial}")
        failures += [f"trial {trial} on {url}" for url in observe_on if sid not in busy(http, url)]
    deadline = time.monotonic() + 60
    for url in observe_on:
        while busy(http, url) & set(sids):
            assert time.monotonic() < deadline, f"{url} still calls sessions busy after their replies"
            time.sleep(0.1)
    for sid in sids:  # idle because answered: every prompt has its complete reply
        reply = http.get(f"{admit_on}/session/{sid}/message").json()[-1]["info"]
        assert reply["role"] == "assistant" and "completed" in reply["time"] and "error" not in reply, reply
    return failures


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_busy_right_after_admission(server: ThreadServer, route: str) -> None:
    send, busy = ROUTES[route]
    with httpx.Client(timeout=30) as http:
        failures = _idle_trials(http, server.url, [server.url], send, busy)
    assert failures == [], f"{len(failures)} of {TRIALS} admitted sessions were reported idle: {failures}"


# -- two processes on one PostgreSQL database ---------------------------------------------------


@pytest.fixture
def two_processes(
    postgres_cluster: Cluster | None, project_dir: Path, config_dir: Path
) -> Iterator[tuple[ProcessServer, ProcessServer]]:
    if postgres_cluster is None:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    url = postgres_cluster.create_database()
    servers = [process_server(url, project_dir, config_dir) for _ in range(2)]
    try:
        start_together(*servers)
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_busy_right_after_admission_on_every_process(
    two_processes: tuple[ProcessServer, ProcessServer], route: str
) -> None:
    """Admitted on A, read on B and on A; then admitted on B while A drains nothing."""
    a, b = two_processes
    send, busy = ROUTES[route]
    with httpx.Client(timeout=30) as http:
        failures = _idle_trials(http, a.url, [b.url, a.url], send, busy)
        failures += _idle_trials(http, b.url, [a.url], send, busy)
    assert failures == [], f"{len(failures)} of {3 * TRIALS} observations said idle: {failures}"


@pytest.mark.slow
def test_a_prompt_admitted_on_a_process_that_dies_is_not_busy_forever(
    two_processes: tuple[ProcessServer, ProcessServer],
) -> None:
    """The process that admitted the prompt is killed at once: the session is busy on the other
    one meanwhile, which takes it over when the lease expires, answers the prompt and goes idle."""
    a, b = two_processes
    with httpx.Client(timeout=30) as http:
        sid = http.post(f"{a.url}/session").json()["id"]
        _legacy_send(http, a.url, sid, "SLOW:0.2 interrupted by a kill")
        a.kill9()
        assert sid in _legacy_busy(http, b.url)
        deadline = time.monotonic() + 30  # a lease of 3 s (tests.servers), then the whole turn
        while sid in _legacy_busy(http, b.url):
            assert time.monotonic() < deadline, "the session stayed busy after its process died"
            time.sleep(0.1)
        replies = [m["info"] for m in http.get(f"{b.url}/session/{sid}/message").json() if m["info"]["role"] != "user"]
    assert replies and all("completed" in info["time"] for info in replies), replies


def _unanswered(http: httpx.Client, url: str, sid: str) -> list[str]:
    """Ids of the session's prompts without a complete reply."""
    history = [m["info"] for m in http.get(f"{url}/session/{sid}/message").json()]
    answered = {m["parentID"] for m in history if m["role"] == "assistant" and "completed" in m["time"]}
    return [m["id"] for m in history if m["role"] == "user" and m["id"] not in answered]


@pytest.mark.slow
def test_idle_anywhere_only_once_every_prompt_is_answered(
    two_processes: tuple[ProcessServer, ProcessServer],
) -> None:
    """One session, prompted on both processes at once, again and again: the second prompt meets
    the first one's drain on the other process, sometimes as that drain ends. Whenever either
    process calls the session idle, every prompt admitted before is answered."""
    a, b = two_processes
    with httpx.Client(timeout=30) as http:
        sid = http.post(f"{a.url}/session").json()["id"]
        for trial in range(TRIALS):
            _legacy_send(http, a.url, sid, f"SLOW:0.02 first {trial}")
            _legacy_send(http, b.url, sid, f"SLOW:0.02 second {trial}")
            deadline = time.monotonic() + 30
            while True:
                idle_on = [url for url in (b.url, a.url) if sid not in _legacy_busy(http, url)]
                if idle_on:  # read after the status: a prompt answered since is answered anyway
                    assert _unanswered(http, a.url, sid) == [], f"trial {trial}: idle on {idle_on} before the answer"
                    if len(idle_on) == 2:
                        break
                assert time.monotonic() < deadline, f"trial {trial}: still busy"
                time.sleep(0.01)


# -- the lease, seen from inside -------------------------------------------------------------------


def test_admission_reserves_the_lease_and_a_late_prompt_keeps_it(server: ThreadServer) -> None:
    """On a shared database: a prompt that will wake the drain reserves the session's lease in
    its own transaction (busy before any drain runs); a drain's release is refused while a prompt
    admitted after its claim waits, and the drain gives the lease up once it is answered."""
    runtime = server.runtime
    cluster = runtime.admission.topology
    if not isinstance(cluster, ClusterTopology):
        pytest.skip("leases exist on a shared database only")
    request = PromptRequest(parts=[{"type": "text", "text": "late"}])

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        reserved = (await runtime.sessions.create(server.settings.directory))["id"]
        await runtime.admission.admit(reserved, request, reserve=True)  # not woken yet
        seen["reserved"] = (await cluster.holders()).get(reserved) == cluster.origin
        seen["reserved busy"] = reserved in await runtime.statuses()
        runtime.coordinator.wake(reserved)
        await runtime.prompting.wait_idle(reserved)
        seen["given up"] = reserved not in await cluster.holders()

        late = (await runtime.sessions.create(server.settings.directory))["id"]
        lease = await cluster.claim(late)
        assert lease is not None
        await runtime.admission.admit(late, request)  # admitted elsewhere, its wake on its way
        seen["kept"] = not await cluster.release(late, lease, unless_admitted_after=lease.seq)
        seen["late busy"] = late in await runtime.statuses()
        seen["released"] = await cluster.release(late, lease)
        seen["idle"] = late not in await runtime.statuses()
        return seen

    seen = asyncio.run_coroutine_threadsafe(scenario(), server.loop).result(timeout=30)
    assert all(seen.values()), seen


def test_a_prompt_admitted_while_another_process_drains_is_left_to_that_drain(server: ThreadServer) -> None:
    """On a shared database: an admission that reads (under the session's hold) a live lease of
    another process neither reserves, claims nor wakes anything here: that drain's release finds
    the prompt. A lease whose owner stopped renewing it is no such drain: the prompt wakes a
    drain here, which takes the session over."""
    runtime = server.runtime
    cluster = runtime.admission.topology
    if not isinstance(cluster, ClusterTopology):
        pytest.skip("leases exist on a shared database only")
    request = PromptRequest(parts=[{"type": "text", "text": "left to the owner"}])
    elsewhere = "other-process"

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        now = now_ms()
        live = (await runtime.sessions.create(server.settings.directory))["id"]
        claimed = await leases.claim(runtime.infra.db, live, elsewhere, now + 60_000, now)
        admitted = await runtime.admission.admit(live, request, reserve=True)
        seen["not woken here"] = admitted.wake is False
        seen["lease untouched"] = (await cluster.holders()).get(live) == elsewhere
        assert claimed.token is not None
        seen["its release finds the prompt"] = not await leases.release(
            runtime.infra.db, live, elsewhere, claimed.token, unless_admitted_after=claimed.last_seq
        )

        expired = (await runtime.sessions.create(server.settings.directory))["id"]
        await leases.claim(runtime.infra.db, expired, elsewhere, now - 1, now - 2)
        seen["woken here"] = (await runtime.admission.admit(expired, request, reserve=True)).wake is True
        return seen

    seen = asyncio.run_coroutine_threadsafe(scenario(), server.loop).result(timeout=30)
    assert all(seen.values()), seen


class _Claims:
    """The coordinator's view of a shared database: one lease per session, and the seqs of the
    inputs admitted and not yet answered."""

    release_sees_admissions = True

    def __init__(self) -> None:
        self.leases: set[str] = set()
        self.waiting: list[int] = []
        self.seq = 0

    def claim_at_once(self, session_id: str) -> Lease | None:
        return None

    def fence(self, session_id: str, lease: Lease) -> Callable[[], None]:
        return lambda: None

    def lease_left(self, session_id: str) -> float:
        return 60.0 if session_id in self.leases else 0.0

    async def claim(self, session_id: str) -> Lease | None:
        self.leases.add(session_id)
        return Lease(1, self.seq)

    async def release(self, session_id: str, lease: Lease, *, unless_admitted_after: int | None = None) -> bool:
        if unless_admitted_after is not None and any(seq > unless_admitted_after for seq in self.waiting):
            return False
        self.leases.discard(session_id)
        return True

    async def close_open(self, session_id: str) -> None:
        return None


async def test_a_prompt_admitted_as_the_drain_ends_gets_another_pass_of_the_same_busy_period() -> None:
    """The drain's last read found nothing, then a prompt was admitted on another process (its
    wake not yet here): the release is refused, the drain goes round once more and answers it,
    and the lease is given up before idle is announced."""
    claims = _Claims()
    passes = 0
    announced: list[tuple[str, bool]] = []

    async def drain(session_id: str, signal: AbortSignal) -> None:
        nonlocal passes
        passes += 1
        claims.waiting.clear()  # every prompt admitted so far is answered
        if passes == 1:
            claims.seq += 1
            claims.waiting.append(claims.seq)  # admitted after the last read

    def on_status(session_id: str, status: SessionStatus) -> None:
        announced.append((status["type"], session_id in claims.leases))

    coordinator = DrainCoordinator(drain, on_status, claims)
    coordinator.wake("ses_1")
    await asyncio.sleep(0)
    await asyncio.wait_for(coordinator.await_idle("ses_1"), 5)
    assert passes == 2 and claims.waiting == []
    assert announced == [("busy", True), ("idle", False)]  # one busy period; idle once the lease is gone


async def test_a_failed_drain_keeps_the_lease_until_a_later_drain_closes_what_it_left() -> None:
    """A drain that fails may leave a reply open that it could not close (a write refused): it
    keeps the lease, unused, whether or not a prompt was admitted since its claim, so no other
    process claims the session as if nothing were open. The watchdog's wake (an unused lease of
    this process) runs the next drain, which answers what waits and gives the lease up."""
    claims = _Claims()
    passes = 0

    async def drain(session_id: str, signal: AbortSignal) -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            claims.seq += 1
            claims.waiting.append(claims.seq)  # admitted elsewhere during this pass
            raise RuntimeError("the drain failed")
        claims.waiting.clear()

    coordinator = DrainCoordinator(drain, lambda session_id, status: None, claims)
    coordinator.wake("ses_1")
    await asyncio.sleep(0)
    await asyncio.wait_for(coordinator.await_idle("ses_1"), 5)
    assert passes == 1 and claims.waiting == [1] and claims.leases == {"ses_1"}
    coordinator.wake("ses_1")  # as the watchdog does, two rounds on
    await asyncio.sleep(0)
    await asyncio.wait_for(coordinator.await_idle("ses_1"), 5)
    assert passes == 2 and claims.waiting == [] and claims.leases == set()


class _LocalClaims(_Claims):
    """One process's claims: releasing checks nothing."""

    release_sees_admissions = False

    async def release(self, session_id: str, lease: Lease, *, unless_admitted_after: int | None = None) -> bool:
        self.leases.discard(session_id)
        return True


@pytest.mark.parametrize("checked", [True, False], ids=["release sees admissions", "release checks nothing"])
async def test_a_wake_during_a_drain_costs_a_pass_only_where_the_release_cannot_tell(checked: bool) -> None:
    """A prompt admitted (and its drain woken) while the drain runs, and answered by that drain's
    next read: where the release sees admissions (a shared database) it confirms nothing waits,
    and no pass goes to find nothing; where it cannot tell, the wake makes one more pass."""
    claims = _Claims() if checked else _LocalClaims()
    passes = 0
    coordinator: DrainCoordinator

    async def drain(session_id: str, signal: AbortSignal) -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            claims.seq += 1
            claims.waiting.append(claims.seq)  # admitted during the turn, its drain woken...
            coordinator.wake(session_id)
            await asyncio.sleep(0)
            claims.waiting.clear()  # ...and answered by the same pass (its next read found it)

    coordinator = DrainCoordinator(drain, lambda session_id, status: None, claims)
    coordinator.wake("ses_1")
    await asyncio.sleep(0)
    await asyncio.wait_for(coordinator.await_idle("ses_1"), 5)
    assert passes == (1 if checked else 2) and claims.leases == set()
