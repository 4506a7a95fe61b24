"""The two topologies below the HTTP layer: one process (``LocalTopology``, with a fake drain and no
database) and a cluster (``ClusterTopology``, on PostgreSQL), and the choice between them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app import ids
from app.clock import now_ms
from app.events.topology import ClusterLogTopology, LeaseLost, LocalLogTopology
from app.runtime.abort import AbortSignal
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions import BUSY, ClusterTopology, DrainCoordinator, LocalTopology, Memo, SessionsDomain
from app.runtime.sessions._recovery import recover
from app.settings import Settings
from app.store import leases
from app.wire import SessionStatus


async def _no_drain(session_id: str, signal: AbortSignal) -> None:
    return None


def _ignore(session_id: str, status: SessionStatus) -> None:
    return None


def test_the_topology_is_chosen_from_the_database(settings: Settings) -> None:
    """SQLite is one process, PostgreSQL a cluster: for the log and for the sessions alike."""
    infra = Infrastructure.create(settings)
    topology = SessionsDomain.build(infra, _no_drain, _ignore).topology
    if settings.database_url.startswith("sqlite"):
        assert isinstance(infra.log.topology, LocalLogTopology) and isinstance(topology, LocalTopology)
    else:
        assert isinstance(infra.log.topology, ClusterLogTopology) and isinstance(topology, ClusterTopology)


async def test_one_process_owns_every_session_and_announces_busy_with_the_wake() -> None:
    topology = LocalTopology()
    announced: list[tuple[str, str]] = []
    finish = asyncio.Event()

    async def drain(session_id: str, signal: AbortSignal) -> None:
        await finish.wait()

    coordinator = DrainCoordinator(drain, lambda sid, status: announced.append((sid, status["type"])), topology)
    await topology.start(coordinator, None)
    coordinator.wake("ses_1")
    assert announced == [("ses_1", "busy")]  # in the wake's own step: the lease needs no claim
    assert await topology.reserved(coordinator.is_held) == set()  # busy is this process's status alone
    assert not await topology.leased("ses_1")
    assert not await topology.tell("ses_1", "permission") and not await topology.forward("ses_1", "abort")
    finish.set()
    await asyncio.wait_for(coordinator.await_idle("ses_1"), 5)
    await asyncio.wait_for(topology.await_idle("ses_1"), 5)  # no other process to wait for
    assert announced == [("ses_1", "busy"), ("ses_1", "idle")]

    async with coordinator.hold("ses_2"):  # granted at once, nothing announced
        assert coordinator.is_held("ses_2") and len(announced) == 2
    memo: Memo[str, list[str]] = topology.memo("rules")
    memo.put_read("project", ["rule"], memo.generation)
    assert memo.get("project") == ["rule"]  # the only writer keeps what it reads
    overtaken = memo.generation
    memo.clear()  # a change committed while a read was on its way
    memo.put_read("project", ["stale"], overtaken)
    assert memo.get("project") is None
    await topology.stop()


@pytest.fixture
async def cluster(settings: Settings) -> AsyncIterator[tuple[Infrastructure, SessionsDomain, list[str]]]:
    """The sessions domain of one process of a cluster, with a drain that only records its passes."""
    infra = Infrastructure.create(settings)
    if not infra.db.shared:
        pytest.skip("a cluster shares a PostgreSQL database")
    announced: list[str] = []
    await infra.db.open()
    await infra.log.start()
    sessions = SessionsDomain.build(infra, _no_drain, lambda sid, status: announced.append(status["type"]))
    await sessions.start(infra)
    try:
        yield infra, sessions, announced
    finally:
        await sessions.stop()
        await infra.log.stop()
        await infra.registry.aclose()
        await infra.db.close()


async def test_a_cluster_reads_busy_from_the_lease_an_admission_reserved(
    cluster: tuple[Infrastructure, SessionsDomain, list[str]],
) -> None:
    infra, sessions, announced = cluster
    topology = sessions.topology
    async with infra.log.transaction() as tx:
        topology.reserve(tx, "ses_1", str(infra.settings.directory))
    assert await sessions.statuses() == {"ses_1": BUSY}  # from the commit on, before any drain
    assert await topology.leased("ses_1")
    assert not await topology.tell("ses_1", "wake")  # the lease is this process's: nobody to tell

    sessions.coordinator.wake("ses_1")
    assert announced == []  # announced once the drain has claimed the lease
    await asyncio.wait_for(sessions.coordinator.await_idle("ses_1"), 5)
    await asyncio.wait_for(topology.await_idle("ses_1"), 5)
    assert announced == ["busy", "idle"]
    assert await sessions.statuses() == {} and not await topology.leased("ses_1")  # given up before idle


async def test_a_cluster_hold_takes_the_lease_but_is_no_work(
    cluster: tuple[Infrastructure, SessionsDomain, list[str]],
) -> None:
    _infra, sessions, announced = cluster
    async with sessions.coordinator.hold("ses_2"):
        assert await sessions.topology.leased("ses_2")  # no other process may drain it meanwhile
        assert await sessions.statuses() == {}  # but this process's own hold reads idle, as on SQLite
    assert not await sessions.topology.leased("ses_2") and announced == []
    memo: Memo[str, list[str]] = sessions.topology.memo("rules")
    memo.put_read("project", ["rule"], memo.generation)
    assert memo.get("project") == ["rule"]  # kept: the other processes say when they change it


async def test_a_lease_taken_again_never_carries_a_token_it_had_before(
    cluster: tuple[Infrastructure, SessionsDomain, list[str]],
) -> None:
    """A drain fences its writes with its lease's owner and token. Were a token handed out again
    once the lease was given up and taken anew, a drain of this process that lost its lease (it
    stalled past it while another process answered its prompt and gave the lease up) would pass
    the fence again as soon as this process reserved the session for a new prompt, and write the
    step it had read before: a prompt answered twice (``bench/chaos.py --seed 49``)."""
    infra, sessions, _ = cluster
    topology, directory = sessions.topology, str(infra.settings.directory)
    tokens = []
    for reserved in (False, True, False, True):  # claimed with and without an admission's reservation
        if reserved:
            async with infra.log.transaction() as tx:
                topology.reserve(tx, "ses_3", directory)
        lease = await topology.claim("ses_3")
        assert lease is not None
        tokens.append(lease.token)
        assert await topology.release("ses_3", lease)
    assert tokens == sorted(set(tokens)), tokens

    stale = await topology.claim("ses_4")  # a drain's lease; the drain stalls here
    assert stale is not None and await topology.release("ses_4", stale)  # taken over and given up
    async with infra.log.transaction() as tx:  # this process admits another prompt
        topology.reserve(tx, "ses_4", directory)
    unfence = topology.fence("ses_4", stale)
    try:
        with pytest.raises(LeaseLost):
            async with infra.log.transaction() as tx:  # the stalled drain's next write
                await tx.emit("session.updated", {"sessionID": "ses_4"}, session_id="ses_4", directory=directory)
    finally:
        unfence()


async def test_start_up_recovery_closes_nothing_in_a_session_claimed_since_it_looked(
    cluster: tuple[Infrastructure, SessionsDomain, list[str]],
) -> None:
    """Start-up recovery reads which sessions other processes lease, then closes what the rest
    left open. Another process may claim a session in between and open its reply: that reply is
    its drain's to finish, so the lease is read again under the session's hold in the closing
    transaction. (Closed without that, the live reply read interrupted; one its drain completed
    a moment before the closing stayed interrupted for good.) With no lease, it is closed."""
    infra, sessions, _ = cluster
    directory = str(infra.settings.directory)
    sid = (await sessions.service.create(directory))["id"]
    reply = {"id": ids.message_id(), "sessionID": sid, "role": "assistant", "time": {"created": now_ms()}}
    async with infra.log.transaction() as tx:
        await tx.emit("message.updated", {"sessionID": sid, "info": reply}, session_id=sid, directory=directory)
    async with infra.log.transaction(hold=sid) as tx:  # another process's claim, after the read
        leases.reserve(tx.scope, sid, "another-process", now_ms() + 60_000)
    topology = sessions.topology

    await recover(infra.log, infra.queries, sessions.service, sessions.coordinator, drains_under=topology.drains_under)
    assert await infra.queries.open_assistant_messages(sid) == [(sid, reply["id"])]

    [held] = await leases.every(infra.db)
    assert await leases.release(infra.db, sid, held.owner, held.token, unless_admitted_after=None)
    await recover(infra.log, infra.queries, sessions.service, sessions.coordinator, drains_under=topology.drains_under)
    assert await infra.queries.open_assistant_messages(sid) == []
