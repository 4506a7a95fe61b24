"""Terminals across server processes on one PostgreSQL database: a pty is served by one process,
and every other process lists it and forwards what concerns it there (HTTP and the WebSocket),
so a client whose requests a balancer spreads over the processes never sees it vanish; once its
process stops or dies, another on the same machine takes it up from its keeper."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import websockets

from tests.processes.test_cluster import balanced, cluster_url, two  # noqa: F401  (fixtures)
from tests.servers import ProcessServer, process_server, start_together
from tests.tools.test_pty import BASH, Reader

pytestmark = pytest.mark.slow


def ws(server: ProcessServer, path: str) -> str:
    return server.url.replace("http://", "ws://") + path


def _listed(url: str, **kwargs) -> list[str]:
    return [info["id"] for info in httpx.get(f"{url}/pty", **kwargs).json()]


async def _through_the_balancer(url: str) -> None:
    """Behind the shipped nginx configuration, every request of a terminal's client lands on
    either process in turn, and each one finds it."""
    made = [httpx.post(f"{url}/pty", json={"command": "cat"}).json()["id"] for _ in range(2)]
    for _ in range(4):
        assert sorted(_listed(url)) == sorted(made)
        assert all(httpx.get(f"{url}/pty/{pty_id}").status_code == 200 for pty_id in made)
    for pty_id in made:
        for attempt in range(2):  # once through each process
            async with websockets.connect(url.replace("http://", "ws://") + f"/pty/{pty_id}/connect") as socket:
                reader = Reader(socket)
                await socket.send(f"line-{attempt}\n")
                await reader.contains(f"line-{attempt}")
        assert httpx.delete(f"{url}/pty/{pty_id}").json() is True
    assert _listed(url) == []


async def test_a_terminal_made_on_one_process_is_driven_through_the_other(
    two: tuple[ProcessServer, ProcessServer],  # noqa: F811
    balanced: str,  # noqa: F811
) -> None:
    await _through_the_balancer(balanced)
    a, b = two
    info = httpx.post(f"{a.url}/pty", json=BASH).json()
    pty_id = info["id"]
    # Listed and read through B as A answers it.
    assert httpx.get(f"{b.url}/pty").json() == [info]
    assert httpx.get(f"{b.url}/pty/{pty_id}").json() == info
    renamed = httpx.put(f"{b.url}/pty/{pty_id}", json={"title": "through b"}).json()
    assert renamed["title"] == "through b" and renamed["pid"] == info["pid"]
    assert httpx.get(f"{a.url}/pty/{pty_id}").json()["title"] == "through b"
    assert httpx.get(f"{b.url}/pty").json()[0]["title"] == "through b"
    # Typed through B, run on A, its output back through B; resized through B too.
    async with websockets.connect(ws(b, f"/pty/{pty_id}/connect")) as socket:
        reader = Reader(socket)
        await reader.replayed()
        await socket.send("echo typed-$((40+2))\n")
        await reader.contains("typed-42")
        assert httpx.put(f"{b.url}/pty/{pty_id}", json={"size": {"rows": 33, "cols": 111}}).status_code == 200
        await socket.send("stty size\n")
        await reader.contains("33 111")
        # Removed through B: A's processes end, the socket through B is closed as A closes it.
        assert httpx.delete(f"{b.url}/pty/{pty_id}").json() is True
        assert await reader.closed() == 1000
    for server in (a, b):
        assert httpx.get(f"{server.url}/pty/{pty_id}").status_code == 404
        assert _listed(server.url) == []
    with pytest.raises(websockets.InvalidStatus) as gone:
        async with websockets.connect(ws(b, f"/pty/{pty_id}/connect")):
            pass
    assert gone.value.response.status_code == 404

    # V2, the other way round, with a connect ticket handed out by B's owner... through A.
    made = httpx.post(f"{b.url}/api/pty", json={"command": "cat", "title": "v2"}).json()["data"]
    assert httpx.get(f"{a.url}/api/pty").json()["data"] == [made]
    assert httpx.get(f"{a.url}/api/pty/{made['id']}").json()["data"] == made
    ticket = httpx.post(f"{a.url}/api/pty/{made['id']}/connect-token", headers={"x-opencode-ticket": "1"})
    url = ws(a, f"/api/pty/{made['id']}/connect?ticket={ticket.json()['data']['ticket']}")
    async with websockets.connect(url) as socket:
        reader = Reader(socket)
        await socket.send("echoed-by-cat\n")
        await reader.contains("echoed-by-cat")
    with pytest.raises(websockets.InvalidStatus) as spent:  # spent at the owner
        async with websockets.connect(url):
            pass
    assert spent.value.response.status_code == 403
    assert httpx.get(f"{a.url}/pty", params={"directory": "/elsewhere"}).json() == []  # scoped by directory
    assert httpx.get(f"{a.url}/pty/{made['id']}", params={"directory": "/elsewhere"}).status_code == 404

    # B dies: A, on the same machine and database, takes its pty up from the pty's keeper (the
    # same program), and serves it from then on.
    # A request for it right away waits for that rather than answer 404 (the row is still B's).
    b.kill9()
    taken = httpx.get(f"{a.url}/api/pty/{made['id']}", timeout=10).json()["data"]
    assert (taken["pid"], taken["title"], taken["status"]) == (made["pid"], "v2", "running")
    assert _listed(a.url) == [made["id"]]
    async with websockets.connect(ws(a, f"/pty/{made['id']}/connect")) as socket:
        reader = Reader(socket)
        await socket.send("still-here\n")
        await reader.contains("still-here")
    assert httpx.delete(f"{a.url}/api/pty/{made['id']}").status_code == 204
    assert _listed(a.url) == []


@pytest.fixture
def guarded(cluster_url: str, project_dir: Path, config_dir: Path) -> Iterator[tuple[ProcessServer, ProcessServer]]:  # noqa: F811
    """Two processes on one database, both with a password."""
    a, b = (process_server(cluster_url, project_dir, config_dir) for _ in range(2))
    with ExitStack() as started:
        for server in (a, b):
            server.env["OPENCODE_SERVER_PASSWORD"] = "secret"
            server.auth = ("opencode", "secret")
            started.callback(server.stop)
        start_together(a, b)
        yield a, b


async def test_forwarding_asks_for_the_password_as_the_owner_does(
    guarded: tuple[ProcessServer, ProcessServer],
) -> None:
    a, b = guarded
    auth = ("opencode", "secret")
    pty_id = httpx.post(f"{a.url}/pty", json={"command": "cat"}, auth=auth).json()["id"]
    assert httpx.get(f"{b.url}/pty/{pty_id}").status_code == 401
    assert httpx.get(f"{b.url}/pty/{pty_id}", auth=("opencode", "wrong")).status_code == 401
    assert httpx.get(f"{b.url}/pty/{pty_id}", auth=auth).json()["id"] == pty_id
    # A request that claims to have been forwarded already is answered where it lands.
    claimed = httpx.get(f"{b.url}/pty/{pty_id}", auth=auth, headers={"x-opensession-forwarded": "1"})
    assert claimed.status_code == 404
    url = ws(b, f"/pty/{pty_id}/connect")
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url):
            pass
    assert refused.value.response.status_code == 401
    with pytest.raises(websockets.InvalidStatus) as forged:  # a ticket passes B's guard; A refuses it
        async with websockets.connect(f"{url}?ticket=forged"):
            pass
    assert forged.value.response.status_code == 403
    header = {"Authorization": "Basic " + base64.b64encode(b"opencode:secret").decode()}
    async with websockets.connect(url, additional_headers=header) as socket:
        reader = Reader(socket)
        await socket.send("through-b\n")
        await reader.contains("through-b")
    # A stops (a rolling restart): B takes its pty up at once, and serves it.
    a.stop()
    assert httpx.get(f"{b.url}/pty/{pty_id}", auth=auth, timeout=10).json()["id"] == pty_id
    assert [p["id"] for p in httpx.get(f"{b.url}/pty", auth=auth).json()] == [pty_id]
    async with websockets.connect(url, additional_headers=header) as socket:
        reader = Reader(socket)
        await socket.send("after-a-stopped\n")
        await reader.contains("after-a-stopped")
