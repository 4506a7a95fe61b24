"""``opensession usage`` and ``GET /opensession/usage``: tokens and cost totalled from the stored
assistant messages, by model, directory or day, since a time; bad input is a 400 naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.usage import since_ms
from app.runtime.usage import report
from app.store.queries import UsageRow
from tests.cli.test_cli import cli
from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer

DAY_MS = 86_400_000


def _row(day: int, directory: str, model: str, cost: float, tokens: int) -> UsageRow:
    return UsageRow(day * DAY_MS + 1000, directory, "prov", model, tokens, tokens // 2, 0, 3, 1, cost)


def test_totals_group_and_sum() -> None:
    rows = [_row(0, "/a", "m1", 0.5, 100), _row(1, "/a", "m2", 2.0, 10), _row(1, "/b", "m1", 0.25, 40)]
    by_model = report(rows, 0, "model")
    assert [(g.key, g.messages, g.input, g.cost) for g in by_model.groups] == [
        ("prov/m2", 1, 10, 2.0),
        ("prov/m1", 2, 140, 0.75),
    ]
    assert by_model.total.messages == 3 and by_model.total.cost == 2.75 and by_model.total.cache_read == 9
    assert [g.key for g in report(rows, 0, "day").groups] == ["1970-01-01", "1970-01-02"]
    assert [g.key for g in report(rows, 0, "directory").groups] == ["/a", "/b"]


def test_since_takes_spans_and_dates() -> None:
    now = 1_000_000.0
    assert since_ms("2h", now) == int((now - 7200) * 1000)
    assert since_ms("7d", now) == int((now - 7 * 86400) * 1000)
    assert since_ms("1970-01-02") == DAY_MS
    assert since_ms(None) == 0


def test_the_route_totals_what_turns_spent(client: httpx.Client, project_dir: Path) -> None:
    sid = create_session(client)["id"]
    for text in ("one", "two"):
        assert client.post(f"/session/{sid}/message", json=text_prompt(text)).status_code == 200
    stored = [m["info"] for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "assistant"]
    body: dict[str, Any] = client.get("/opensession/usage", params={"by": "directory"}).json()
    [group] = body["groups"]
    assert group["key"] == str(project_dir) and group["messages"] == 2
    assert group["input"] == sum(i["tokens"]["input"] for i in stored) > 0
    assert group["output"] == sum(i["tokens"]["output"] for i in stored) > 0
    assert body["total"]["messages"] == 2
    later = client.get("/opensession/usage", params={"since": stored[-1]["time"]["created"] + 1}).json()
    assert later["groups"] == [] and later["total"]["messages"] == 0
    bad = client.get("/opensession/usage", params={"by": "session"})
    assert bad.status_code == 400 and bad.json()["data"]["kind"] == "Query"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_command_prints_a_table_or_json(
    server: ThreadServer, client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    sid = create_session(client)["id"]
    for text in ("one", "two"):
        assert client.post(f"/session/{sid}/message", json=text_prompt(text)).status_code == 200
    run = cli("usage", "--json", "--by", "model", "--attach", server.url, db=tmp_path / "unused.db", cwd=project_dir)
    assert run.returncode == 0, run.stderr
    assert [g["key"] for g in json.loads(run.stdout)["groups"]] == ["opensession/echo"]
    table = cli("usage", "--since", "1d", "--attach", server.url, db=tmp_path / "unused.db", cwd=project_dir)
    header, row, total = table.stdout.splitlines()
    assert header.split()[:3] == ["GROUP", "MESSAGES", "INPUT"]
    assert row.split()[:2] == ["opensession/echo", "2"] and total.split()[:2] == ["total", "2"]
    wrong = cli("usage", "--since", "yesterday", "--attach", server.url, db=tmp_path / "unused.db", cwd=project_dir)
    assert wrong.returncode == 1 and "--since" in wrong.stderr
