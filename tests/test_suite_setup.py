"""The suite's own machinery: the order files go out to xdist workers, the workspace copy."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FILES
from tests.support import REPO
from tests.workspace import CONTENT, git, make_workspace, status


def test_every_long_file_named_for_early_scheduling_exists():
    """A renamed file would silently fall back to alphabetical order, last again."""
    missing = [name for name in LONG_FILES if not (REPO / name).is_file()]
    assert missing == []


def test_workspaces_are_independent_committed_copies(tmp_path: Path):
    first = make_workspace(tmp_path / "one")
    (tmp_path / "two").mkdir()  # as tmp_path_factory.mktemp makes it
    second = make_workspace(tmp_path / "two")  # copied from the template the first built
    for root in (first, second):
        assert status(root) == ""
        assert git(root, "log", "--format=%s").split() == ["initial"]
        assert all((root / name).is_dir() for name in CONTENT)
    (first / "overlays" / "edited.yaml").write_text("a: 1\n")
    assert status(first) == "?? overlays/edited.yaml\n"
    assert status(second) == ""
    assert (second / "overlays").resolve() != (first / "overlays").resolve()
