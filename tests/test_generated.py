"""Generated files stay in sync with what generates them."""

from __future__ import annotations

import subprocess
import sys


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
