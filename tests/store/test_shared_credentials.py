"""Provider credentials on a database several processes share (``app.store.credentials``): each
process's copy follows the others' changes, and concurrent changes on different connections
lose none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from app.providers.credentials import Credentials
from app.store import credentials as stored
from app.store import following
from app.store.credentials import SharedCredentials
from app.store.database import Database, open_database


@pytest.fixture
async def two(pg_url: str) -> AsyncIterator[tuple[Credentials, Credentials]]:
    """The credentials as two processes see them: a database connection and a keeper each."""
    dbs: list[Database] = []
    keepers: list[SharedCredentials] = []
    try:
        for _ in range(2):
            db = open_database(pg_url)
            dbs.append(db)
            await db.open()
            keeper = SharedCredentials(db)
            keepers.append(keeper)
            await keeper.start()
        yield Credentials(keepers[0]), Credentials(keepers[1])
    finally:
        for keeper in keepers:
            await keeper.stop()
        for db in dbs:
            await db.close()


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_change_on_one_process_reaches_the_other_and_changes_its_version(
    two: tuple[Credentials, Credentials],
) -> None:
    a, b = two
    version = b.version()
    await a.connect("deepseek", "sk-one", "work", "cred_1")
    assert a.api_key("deepseek") == "sk-one"  # the process that changed them uses it at once
    await _until(lambda: b.api_key("deepseek") == "sk-one")
    assert b.version() != version
    assert b.connection("deepseek") == ("cred_1", "work")

    assert await b.relabel("cred_1", "home") == "deepseek"
    await _until(lambda: a.connection("deepseek") == ("cred_1", "home"))
    assert await a.forget("cred_1") == "deepseek"
    await _until(lambda: b.get("deepseek") is None)
    assert await b.forget("cred_1") is None  # gone: nothing to forget, nothing changes


async def test_a_change_is_read_within_the_refresh_without_its_notification(
    two: tuple[Credentials, Credentials], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    monkeypatch.setattr(following, "REFRESH_S", 0.2)
    await b.set("groq", {"type": "api", "key": "sk-early"})  # B's refresher now waits the short pause
    await _until(lambda: a.api_key("groq") == "sk-early")

    async def lost(_channel: str, *_payloads: str) -> None:
        pass  # the notification never arrives (the database was away)

    assert isinstance(a.keeper, SharedCredentials)
    monkeypatch.setattr(a.keeper._db, "notify", lost)
    await a.set("groq", {"type": "api", "key": "sk-late"})
    await _until(lambda: b.api_key("groq") == "sk-late", timeout=3)


async def test_concurrent_changes_from_two_processes_lose_none(two: tuple[Credentials, Credentials]) -> None:
    """A rename racing a removal of the same credential, on two connections: whichever goes
    first, it is gone after both (a rename that read it before the removal committed must not
    write it back). And connections of different providers, made at once, are all kept."""
    a, b = two
    for round_ in range(15):
        credential = f"cred_{round_}"
        await a.connect("anthropic", f"sk-{round_}", "default", credential)
        await _until(lambda: b.connection("anthropic") == (credential, "default"))  # noqa: B023 - awaited here
        await asyncio.gather(a.relabel(credential, "renamed"), b.forget(credential))
        every = await stored.every(a.keeper._db)  # type: ignore[attr-defined]
        assert "anthropic" not in every, (round_, every)
        await _until(lambda: a.get("anthropic") is None and b.get("anthropic") is None)

    providers = [f"provider-{i}" for i in range(10)]
    await asyncio.gather(
        *((a if i % 2 else b).set(provider, {"type": "api", "key": f"k{i}"}) for i, provider in enumerate(providers))
    )
    await _until(lambda: set(providers) <= set(a.all()) and set(providers) <= set(b.all()))


async def test_a_refresh_shows_a_change_just_made_elsewhere(two: tuple[Credentials, Credentials]) -> None:
    """What the routes do before they show credentials: no waiting for the notification."""
    a, b = two
    for round_ in range(10):
        await a.set("mistral", {"type": "api", "key": f"sk-{round_}"})
        await b.refresh()
        assert b.api_key("mistral") == f"sk-{round_}", round_
        await b.remove("mistral")
        await a.refresh()
        assert a.get("mistral") is None, round_
