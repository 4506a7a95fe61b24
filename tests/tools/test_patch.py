"""apply_patch against a real directory: OpenCode's patch format, all-or-nothing verification,
confinement, the edit permission and the errors a model reads."""

from __future__ import annotations

import pytest

from app.runtime.agents import Denied
from app.runtime.tools import ToolError, offered_for
from tests.tool_harness import Harness

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"])


@SQLITE
async def test_add_update_move_delete_in_one_patch(tools: Harness) -> None:
    root = tools.root
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("import os\n\ndef greet():\n    print(\u201cHi\u201d)\n    return 1\n")
    (root / "old.txt").write_text("bye\n")
    (root / "notes.md").write_text("a\nb\nc\n")
    result = await tools.run(
        "apply_patch",
        patchText=_patch(
            "*** Add File: docs/hello.txt",
            "+Hello world",
            "*** Update File: src/app.py",
            "*** Move to: src/main.py",
            "@@ def greet():",
            '-    print("Hi")',  # typographic quotes in the file still match
            '+    print("Hello")',
            "     return 1",
            "*** Update File: notes.md",
            "@@",
            " b",
            "-c",
            "+C",
            "*** End of File",
            "*** Delete File: old.txt",
        ),
    )
    assert result.output == (
        "Success. Updated the following files:\nA docs/hello.txt\nM src/main.py\nM notes.md\nD old.txt"
    )
    assert (root / "docs" / "hello.txt").read_text() == "Hello world\n"
    assert not (root / "src" / "app.py").exists()
    assert (root / "src" / "main.py").read_text() == 'import os\n\ndef greet():\n    print("Hello")\n    return 1\n'
    assert (root / "notes.md").read_text() == "a\nb\nC\n"
    assert not (root / "old.txt").exists()
    assert tools.asked == [("edit", ["docs/hello.txt", "src/app.py", "src/main.py", "notes.md", "old.txt"])]
    kinds = [(f["type"], f["relativePath"]) for f in result.metadata["files"]]
    assert kinds == [("add", "docs/hello.txt"), ("move", "src/main.py"), ("update", "notes.md"), ("delete", "old.txt")]


@SQLITE
@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ("*** Update File: a.txt\n-x\n+y", "apply_patch verification failed: Invalid patch format: missing Begin/End"),
        (_patch(), "patch rejected: empty patch"),
        (_patch("*** Frobnicate: a.txt"), "apply_patch verification failed: line 2: expected '*** Add File: <path>'"),
        (_patch("*** Add File: new.txt", "no plus"), "every line of an added file starts with '+'"),
        (_patch("*** Update File: a.txt", "@@", "-missing", "+y"), "Failed to find expected lines in "),
        (_patch("*** Update File: a.txt", "@@ nowhere", "-one", "+y"), "Failed to find context 'nowhere' in "),
        (_patch("*** Update File: gone.txt", "@@", "-one", "+y"), "Failed to read file to update: "),
        (_patch("*** Delete File: gone.txt"), "Failed to read file to delete: "),
    ],
)
async def test_malformed_or_mismatched_patches_change_nothing(tools: Harness, patch: str, error: str) -> None:
    (tools.root / "a.txt").write_text("one\ntwo\n")
    with pytest.raises(ToolError) as raised:
        await tools.run("apply_patch", patchText=patch)
    assert error in str(raised.value)
    assert (tools.root / "a.txt").read_text() == "one\ntwo\n" and tools.asked == []


@SQLITE
async def test_a_later_bad_section_leaves_earlier_ones_unwritten(tools: Harness) -> None:
    patch = _patch("*** Add File: first.txt", "+1", "*** Update File: missing.txt", "@@", "-x", "+y")
    with pytest.raises(ToolError):
        await tools.run("apply_patch", patchText=patch)
    assert not (tools.root / "first.txt").exists()


@SQLITE
async def test_paths_outside_need_external_directory_and_a_refusal_stops_the_patch(tools: Harness) -> None:
    tools.refuse.add("external_directory")
    with pytest.raises(Denied):
        await tools.run("apply_patch", patchText=_patch("*** Add File: ../escape.txt", "+x"))
    assert not (tools.root.parent / "escape.txt").exists()
    assert tools.asked[0][0] == "external_directory"


def test_gpt_family_models_get_apply_patch_instead_of_edit_and_write() -> None:
    for model in ("gpt-5", "gpt-5-codex", "openai/gpt-5.1"):
        assert "apply_patch" in offered_for(model) and not {"edit", "write"} & set(offered_for(model))
    for model in ("gpt-4o", "gpt-oss-120b", "o3", "claude-sonnet-4", "echo"):
        assert "apply_patch" not in offered_for(model) and {"edit", "write"} <= set(offered_for(model))
    assert "invalid" not in offered_for("gpt-5")


def _deny_edits(tools: Harness, pattern: str) -> None:
    tools.rules = [{"permission": "edit", "pattern": "*", "action": "allow"}]
    tools.rules.append({"permission": "edit", "pattern": pattern, "action": "deny"})


@SQLITE
@pytest.mark.parametrize(
    "body",
    [
        ("*** Update File: a.txt", "*** Move to: locked/a.txt", "@@", "-one", "+uno"),  # the move's destination
        ("*** Add File: free.txt", "+x", "*** Update File: locked/b.txt", "@@", "-b", "+c"),  # a later file
        ("*** Update File: alias.txt", "@@", "-b", "+c"),  # a permitted name that links to a denied file
        ("*** Update File: a.txt", "*** Move to: alias.txt", "@@", "-one", "+uno"),
        ("*** Delete File: alias.txt",),
        ("*** Add File: dangling.txt", "+x"),  # a link to a denied file that does not exist yet
    ],
)
async def test_every_path_a_patch_writes_is_checked(tools: Harness, body: tuple[str, ...]) -> None:
    """The edit rules apply to each path the patch writes: sources, move destinations, every
    section, and where a symlink really leads (a move once overwrote a denied file unasked)."""
    root = tools.root
    (root / "locked").mkdir()
    (root / "a.txt").write_text("one\ntwo\n")
    (root / "locked" / "a.txt").write_text("keep\n")
    (root / "locked" / "b.txt").write_text("b\n")
    (root / "alias.txt").symlink_to(root / "locked" / "b.txt")
    (root / "dangling.txt").symlink_to(root / "locked" / "new.txt")
    _deny_edits(tools, "locked/*")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(Denied):
        await tools.run("apply_patch", patchText=_patch(*body))
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert not (root / "free.txt").exists() and not (root / "locked" / "new.txt").exists()


@SQLITE
async def test_a_denied_name_that_is_a_symlink_is_denied_too(tools: Harness) -> None:
    """A rule on a name holds when that name is a symlink to a file the rules allow."""
    (tools.root / "real.txt").write_text("one\n")
    (tools.root / ".env").symlink_to(tools.root / "real.txt")
    _deny_edits(tools, ".env")
    with pytest.raises(Denied):
        await tools.run("apply_patch", patchText=_patch("*** Update File: .env", "@@", "-one", "+two"))
    assert (tools.root / "real.txt").read_text() == "one\n"
    await tools.run("apply_patch", patchText=_patch("*** Update File: real.txt", "@@", "-one", "+two"))
    assert (tools.root / "real.txt").read_text() == "two\n"
