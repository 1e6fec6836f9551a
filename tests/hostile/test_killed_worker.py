"""A worker process of `validate -j` killed mid-run (the OOM killer, a signal). Class:
edits and workers recover from kills: the run still reports every target, exactly as a
run with one process does, and never prints a traceback."""

from __future__ import annotations

import os
import signal

from tests.hostile.harness import CONFIGMAP, assert_handled, run_cli, write
from trainops import pipeline


def die(jobs):
    """Stands in for the worker's validation: the worker is killed (SIGKILL) at once."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_worker_leaves_no_target_unreported(tmp_path, monkeypatch):
    names = [f"t{i}.yaml" for i in range(4)]
    for index, name in enumerate(names):
        text = CONFIGMAP.format(name=f"c{index}")
        write(tmp_path / name, text + ("replicas: 3\n" if index % 2 else ""))
    single = run_cli("validate", "--no-cache", "-j", "1", "--format", "json", *names, cwd=tmp_path)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_UNITS", 0)
    monkeypatch.setattr(pipeline, "_validate_group", die)  # spawned workers import this module
    killed = run_cli("validate", "--no-cache", "-j", "2", "--format", "json", *names, cwd=tmp_path)
    assert_handled(killed)
    assert (killed.code, killed.out) == (single.code, single.out)
    assert single.code == 1  # two targets have an error: the comparison covers findings
