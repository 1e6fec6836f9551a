"""A fuzzer over rendered training jobs: any field may get a value of another type.

Hypothesis mutates the repository's own rendered jobs (PyTorchJob, MPIJob, ...: what
an ML engineer edits) one to three fields at a time: a scalar for a map, a map for a
list, huge or non-finite numbers, YAML's special strings, a field removed. Whatever
the job, validate exits 0, 1 or 2, says one line on exit 2, never prints a traceback,
and stays within an operation budget: Python function calls counted by a profiler
hook, not a clock, so the bound holds on a loaded machine and fails on a blow-up.
"""

from __future__ import annotations

import copy
import functools
import json
import sys
import threading
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.harness import assert_handled, run_cli
from tests.support import REPO

TRAINING_KINDS = {"PyTorchJob", "MPIJob", "TrainJob", "JobSet", "ClusterTrainingRuntime"}
# Function calls one validation of one mutated job may make. A clean job takes about
# a tenth of this; a super-linear path (a regex, a rescan per field) blows through it.
CALL_BUDGET = 4_000_000


@functools.cache
def rendered_jobs() -> list[dict]:
    """Rendered on first use, not at import: every xdist worker collects this module."""
    targets = sorted(str(p.relative_to(REPO)) for p in REPO.glob("overlays/*/training/*"))
    outcome = run_cli("render", "--no-cache", "--format", "json", *targets, cwd=REPO)
    assert outcome.code == 0, outcome.err
    jobs = [r["object"] for r in json.loads(outcome.out) if r["object"]["kind"] in TRAINING_KINDS]
    assert len(jobs) >= 6, [j["kind"] for j in jobs]
    return jobs


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@functools.cache
def field_paths(index: int) -> list[tuple]:
    return _paths(rendered_jobs()[index])


SPECIAL = [
    "", "0", "-1", "1e309", "NaN", ".inf", "~", "null", "yes", "on", "0x1F", "0o17", "1Gi",
    "-5Gi", "1.5", "$(MASTER_ADDR)", "${HOME}", "a" * 5000, "\u202e", "x\ny", "*", "<<", "---",
    "{{.path.path}}", "../../etc/passwd", "/dev/zero",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(SPECIAL),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=12), children, max_size=4),
    ),
    max_leaves=16,
)
REMOVE = object()


@st.composite
def mutated_job(draw) -> dict:
    jobs = rendered_jobs()
    index = draw(st.integers(min_value=0, max_value=len(jobs) - 1))
    job = copy.deepcopy(jobs[index])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(field_paths(index)))
        value = draw(st.one_of(VALUES, st.just(REMOVE)))
        node = job
        for step in path[:-1]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                break  # an earlier mutation replaced this branch
        else:
            try:
                if value is REMOVE:
                    del node[path[-1]]
                else:
                    node[path[-1]] = value
            except (KeyError, IndexError, TypeError):
                pass
    return job


class _BudgetExceeded(BaseException):
    """Not an Exception: no handler in trainops may swallow it."""


class OperationBudget:
    """Counts Python function calls in every thread while active; stops at the limit."""

    def __init__(self, limit: int):
        self.limit = limit
        self.calls = 0

    def _profile(self, frame, event, arg):
        if event == "call":
            self.calls += 1
            if self.calls > self.limit:
                raise _BudgetExceeded(f"more than {self.limit} calls")

    def __enter__(self) -> OperationBudget:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


@settings(
    max_examples=40,
    deadline=None,  # bounded by the operation budget, never by a clock
    derandomize=True,  # the same examples on every run and in CI
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(job=mutated_job())
def test_validate_survives_any_field_of_any_type(tmp_path_factory, job: dict):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job, allow_unicode=True, width=10_000))
    with OperationBudget(CALL_BUDGET) as budget:
        outcome = run_cli("validate", "--no-cache", "-j", "1", path.name, cwd=folder)
    assert budget.calls <= CALL_BUDGET
    assert_handled(outcome)


def test_the_budget_stops_a_runaway():
    """The budget is real: an endless recursion is cut off by it, not by a timeout."""

    def runaway(n: int) -> int:
        return runaway(n + 1) if n < 10**9 else n

    caught = None
    try:
        with OperationBudget(10_000):
            sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
            runaway(0)
    except _BudgetExceeded as exc:
        caught = exc
    assert caught is not None


def test_the_fuzzer_starts_from_jobs_that_validate(tmp_path: Path):
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(rendered_jobs()))
    outcome = run_cli("validate", "--no-cache", path.name, cwd=tmp_path)
    assert_handled(outcome)
    assert outcome.code in (0, 1)  # file targets lack their cluster: some findings expected
