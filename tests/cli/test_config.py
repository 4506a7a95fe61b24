"""Configuration look-ups inside a ``reading`` block (a prompt's admission, a turn step) check the
files once; an edit takes effect from the next block, and a task started in a block does not keep
its view after the block ends. The typed view reads each key once, a malformed section declaring
nothing. Ids keep their format and order while drawing pooled randomness."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

from app import ids
from app.config import ConfigLoader, OpenCodeConfig, memoized, reading


def _loader(tmp_path: Path, model: str) -> tuple[ConfigLoader, Path]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    _write(project, model)
    return ConfigLoader(str(tmp_path / "user-config")), project


def _write(project: Path, model: str) -> None:
    path = project / "opencode.json"
    path.write_text(json.dumps({"model": model, "pad": "x" * len(model)}))  # the size changes with it
    os.utime(path, ns=(len(model) * 10**9, len(model) * 10**9))  # and the mtime, however fast the clock


def test_an_edit_applies_from_the_next_block(tmp_path: Path) -> None:
    loader, project = _loader(tmp_path, "a/one")
    with reading():
        assert loader.load(str(project)).model == "a/one"
        _write(project, "b/second")
        assert loader.load(str(project)).model == "a/one"
        with reading():  # nested: the same reading
            assert loader.load(str(project)).model == "a/one"
    assert loader.load(str(project)).model == "b/second"
    with reading():
        assert loader.load(str(project)).model == "b/second"


def test_outside_a_block_every_look_up_checks_the_files(tmp_path: Path) -> None:
    loader, project = _loader(tmp_path, "a/one")
    assert loader.load(str(project)).model == "a/one"
    _write(project, "b/second")
    assert loader.load(str(project)).model == "b/second"
    computed: list[int] = []
    for _ in range(2):
        memoized("key", lambda: computed.append(1))
    assert len(computed) == 2


async def test_a_task_started_in_a_block_reads_afresh_once_it_ended(tmp_path: Path) -> None:
    loader, project = _loader(tmp_path, "a/one")
    go_on = asyncio.Event()

    async def later() -> str | None:
        await go_on.wait()
        return loader.load(str(project)).model

    with reading():
        loader.load(str(project))
        task = asyncio.create_task(later())
        _write(project, "b/second")
    go_on.set()
    assert await task == "b/second"


def test_the_typed_view_reads_each_key_and_ignores_malformed_sections() -> None:
    config = OpenCodeConfig.of(
        {
            "model": "a/b",
            "agent": {"plan": {"model": "x/y"}, "odd": "text"},
            "command": {"hi": {"template": "t"}, "bad": 3},
            "experimental": {"mcp_timeout": 2500},
            "watcher": {"ignore": ["dist/**", 7]},
            "provider": {"p": {"env": ["P_KEY", 1]}, "q": "not an object"},
            "snapshot": False,
            "compaction": "yes",
            "skills": ["not", "an object"],
            "mcp": [],
        }
    )
    assert (config.model, config.small_model, config.snapshot, config.auto_compaction) == ("a/b", None, False, True)
    assert config.agents == {"plan": {"model": "x/y"}, "odd": {}}
    assert list(config.commands) == ["hi"] and config.mcp == {} and config.skill_paths == ()
    assert config.mcp_timeout_seconds == 2.5 and config.watcher_ignore == ("dist/**",)
    assert list(config.providers) == ["p"] and config.providers["p"].env == ("P_KEY",)


def test_ids_keep_their_format_and_order() -> None:
    made = [ids.message_id() for _ in range(3000)]  # more than one pool of random tails
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(re.fullmatch(r"msg_[0-9a-f]{12}[0-9A-Za-z]{14}", i) for i in made)
    sessions = [ids.session_id() for _ in range(10)]
    assert sessions == sorted(sessions, reverse=True)
