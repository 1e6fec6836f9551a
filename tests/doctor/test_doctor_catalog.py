"""Every finding id the doctor can print is in the rule catalog, documented and explained."""

from __future__ import annotations

from tests.support import REPO
from trainops.doctor import catalog as messages
from trainops.doctor import nccl_tests
from trainops.doctor.analysis import UNPROVEN, UNRECOGNISED
from trainops.doctor.findings import CHECKS
from trainops.doctor.job import NO_NCCL_EVIDENCE, POD_PROBLEMS, RESTARTS, UNSCHEDULABLE
from trainops.rules import DOCTOR, catalog


def test_every_doctor_id_is_in_the_catalog_as_a_doctor_rule():
    ids = {c.info.id for c in CHECKS} | {UNRECOGNISED.id, RESTARTS.id, UNSCHEDULABLE.id}
    ids |= {UNPROVEN.id} | set(messages.families())
    ids |= {NO_NCCL_EVIDENCE.id} | {rule.id for rule, _ in POD_PROBLEMS.values()}
    ids |= {
        info.id for info in vars(nccl_tests).values() if getattr(info, "category", None) == DOCTOR
    }
    doctor = {r.id for r in catalog().values() if r.category == DOCTOR}
    assert ids == doctor and len(ids) >= 50


def test_the_runbook_lists_every_doctor_finding():
    runbook = (REPO / "docs" / "runbook.md").read_text()
    for rule in catalog().values():
        if rule.category == DOCTOR:
            assert f"| `{rule.id}` |" in runbook


def test_policies_explain_knows_doctor_findings_and_list_keeps_to_policies(trainops):
    explain = trainops("policies", "explain", "shm-exhausted")
    assert explain.code == 0 and "/dev/shm" in explain.out
    listing = trainops("policies", "list")
    assert (
        listing.code == 0
        and "shm-exhausted" not in listing.out
        and "dev-shm-missing" in listing.out
    )
