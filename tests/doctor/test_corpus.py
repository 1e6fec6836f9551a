"""The doctor on public GitHub threads: does it name the cause the thread reached?

Each case is a file in tests/doctor/corpus (see corpus_cases). A case is named when the
expected finding is reported (with its cue in the message); a statement is wrong when an
error or warning finding is neither the cause nor listed as also true. A failed job must
never be reported as "no problems found".
"""

from __future__ import annotations

import pytest

from tests.doctor.corpus_cases import Case, answer, cases
from trainops.rules import DOCTOR, catalog

CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_thread(case: Case):
    said = answer(case)
    assert not said.wrong(case), f"wrong statements: {said.wrong(case)}"
    if case.outcome == "failed":
        assert not said.says_no_problems
    if case.miss:
        assert not said.named(case), "the case is named now: drop its miss line"
    else:
        assert said.named(case), f"{case.expect!r} ({case.cue!r}) not among {said.findings}"


def test_corpus_is_real_and_well_formed():
    assert len(CASES) >= 40
    doctor_ids = {r.id for r in catalog().values() if r.category == DOCTOR}
    for case in CASES:
        assert case.source.startswith("https://github.com/"), case.name
        assert len(case.diagnosis) > 40 and case.lines, case.name
        assert case.outcome in ("failed", "degraded"), case.name
        assert case.set in ("development", "held-out"), case.name
        assert case.expect in doctor_ids and case.also <= doctor_ids, case.name
    assert len({c.source for c in CASES}) == len(CASES)


def test_corpus_figure():
    """At least 80% named and nothing wrong, measured over every case."""
    results = [(case, answer(case)) for case in CASES]
    named = [case.name for case, said in results if said.named(case)]
    wrong = [case.name for case, said in results if said.wrong(case)]
    assert len(named) >= 0.8 * len(CASES), f"named {len(named)}/{len(CASES)}"
    assert wrong == []


@pytest.mark.parametrize("name", ["nccl-342-docker-shm", "akash-support-209-xid79"])
def test_corpus_logs_through_the_cli(trainops, name):
    [case] = [c for c in CASES if c.name == name]
    run = trainops("doctor", "nccl", "-", stdin="\n".join(case.lines) + "\n")
    assert run.code == 1, run.err
    assert f"[{case.expect}]" in run.out and "no problems found" not in run.out
