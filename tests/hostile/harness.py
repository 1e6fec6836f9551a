"""Runs the CLI in this process (hundreds of hostile cases cost no interpreter start-up)
and states what every outcome must be, whatever the input: exit 0, 1 or 2; on exit 2
one line naming the problem and nothing on stdout; never a traceback."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from trainops.cli import cli


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    exception: BaseException | None


def run_cli(*args: str, cwd: Path, cache: Path | None = None, stdin: str | bytes = "") -> Outcome:
    """`trainops ARGS` in `cwd`, with its own cache directory (or none)."""
    env = {"TRAINOPS_CACHE_DIR": str(cache)} if cache is not None else {}
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, list(args), input=stdin, env=env)
    finally:
        os.chdir(previous)
    exception = result.exception if not isinstance(result.exception, SystemExit) else None
    return Outcome(result.exit_code, result.stdout, result.stderr, exception)


def assert_handled(outcome: Outcome) -> None:
    """Exit 0, 1 or 2; exit 2 is one line on stderr and nothing on stdout; no traceback."""
    assert outcome.exception is None, f"unhandled {outcome.exception!r}"
    assert outcome.code in (0, 1, 2), outcome
    assert "Traceback" not in outcome.err
    if outcome.code == 2:
        lines = outcome.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("trainops: error: "), outcome.err
        assert outcome.out == "", "no partial output on exit 2"


def assert_refused(outcome: Outcome, *words: str) -> None:
    """Exit 2 with one line holding every word."""
    assert_handled(outcome)
    assert outcome.code == 2, outcome
    for word in words:
        assert word in outcome.err, (word, outcome.err)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"
