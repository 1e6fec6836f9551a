"""Generated files stay in sync with what generates them."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO


def test_docs_are_current():
    done = subprocess.run(
        [sys.executable, "-m", "trainops.docs", "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_merge_keys_schema_is_current(trainops):
    run = trainops("schemas", "merge-keys", "--check")
    assert run.code == 0, run.out + run.err


def test_check_notices_a_stale_merge_keys_schema(trainops, tmp_path):
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    run = trainops("schemas", "merge-keys", "--check", "-o", str(stale))
    assert run.code == 1 and "out of date" in run.out


def test_runbook_names_only_existing_policies_and_commands():
    import re

    from trainops.cli import cli
    from trainops.policy import registered
    from trainops.policy.settings import load_pack

    load_pack(REPO / "policies")
    runbook = (REPO / "docs" / "runbook.md").read_text()
    cited = set()
    for sentence in re.findall(r"[Pp]olic(?:y|ies)[^.;]*", runbook):
        cited |= set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", sentence))
    assert cited and cited <= set(registered()), cited - set(registered())
    commands = set(re.findall(r"`trainops ([a-z-]+)", runbook))
    known = set(cli.list_commands(None))
    assert commands <= known, commands - known
