"""The failure-mode catalog (policies/catalog/): complete, sourced, and tied to real checks.

Every entry names checks that exist (policy rules, admission checks, doctor findings, or
`diff`) or says why none can see it offline; every policy rule catches at least one entry,
so docs/policies.md can link each rule to the failure modes it is for. docs/failure-modes.md
is generated from the catalog (tests/test_generated.py keeps it current).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO
from trainops import failures
from trainops.docs import check_kinds
from trainops.errors import InputError

PACK = REPO / "policies"
COMPONENTS = failures.load(PACK / "catalog")
ENTRIES = failures.entries(COMPONENTS)
# The components the project supports, each of which the catalog must cover.
REQUIRED = {
    "training-operator",
    "mpi-operator",
    "trainer",
    "jobset",
    "kueue",
    "volcano",
    "indexed-job",
    "argocd",
    "gpu-operator",
    "network",
    "torchrun",
    "nccl",
    "accelerate",
    "deepspeed",
    "mpirun",
    "kubernetes-env",
    "storage",
    "pod-security",
}
# A GitHub file cited at a moving branch changes under the citation.
_BLOB = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/([^/]+)/")
_MOVING = {"main", "master", "HEAD", "develop"}


def test_the_catalog_covers_every_component_with_150_entries():
    assert {c.key for c in COMPONENTS} >= REQUIRED
    assert len(ENTRIES) >= 150
    assert all(len(c.entries) >= 5 for c in COMPONENTS)


def test_entries_name_checks_that_exist():
    kinds = check_kinds(PACK)
    unknown = {(e.id, c) for e in ENTRIES for c in e.caught if c not in kinds}
    assert unknown == set()


def test_an_entry_is_caught_before_the_sync_or_says_why_not():
    kinds = check_kinds(PACK)
    for entry in ENTRIES:
        offline = [c for c in entry.caught if kinds[c] != "doctor"]
        assert offline or entry.offline, entry.id
        assert not (offline and entry.offline), f"{entry.id}: caught offline yet 'not detectable'"


def test_every_policy_rule_catches_a_catalog_entry():
    kinds = check_kinds(PACK)
    rules = {check for check, kind in kinds.items() if kind == "policy"}
    # About trainops' own annotations and generated files, not a failure mode of a component.
    rules -= {"policy-exemption", "profile-drift"}
    assert rules - set(failures.by_check(COMPONENTS)) == set()


def test_sources_are_public_and_pinned():
    for entry in ENTRIES:
        found = _BLOB.match(entry.source)
        assert found is None or found.group(1) not in _MOVING, entry.id


def test_each_rule_links_its_entries_in_docs_policies_md():
    text = (REPO / "docs" / "policies.md").read_text()
    for check, entries in failures.by_check(COMPONENTS).items():
        if f"## {check}\n" not in text:
            continue  # a doctor finding or diff: documented in runbook.md / cli.md
        section = text.split(f"## {check}\n", 1)[1].split("\n## ", 1)[0]
        for entry in entries:
            assert f"(failure-modes.md#{entry.id})" in section, (check, entry.id)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("component: x\nversion: '1'\nentries: [{id: a}]\n", "writes must be a non-empty string"),
        (
            "component: x\nversion: '1'\nentries:\n- {id: a, writes: w, happens: boom, "
            "effect: e, source: 'https://x'}\n",
            "happens must be one of",
        ),
        (
            "component: x\nversion: '1'\nentries:\n- {id: a, writes: w, happens: hang, "
            "effect: e, source: 'https://x'}\n",
            "needs the checks that catch it or an offline reason",
        ),
        (
            "component: x\nversion: '1'\nentries:\n- {id: a, writes: w, happens: hang, "
            "effect: e, source: 'ftp://x', caught: [schema]}\n",
            "source must be an https address",
        ),
        ("entries: []\n", "needs component, version and a list of entries"),
    ],
)
def test_a_malformed_component_file_is_an_input_error_naming_it(tmp_path: Path, text, message):
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(InputError) as raised:
        failures.load(tmp_path)
    assert message in str(raised.value) and "x.yaml" in str(raised.value)


def test_an_entry_id_is_unique_across_components(tmp_path: Path):
    entry = (
        "- {id: same, writes: w, happens: hang, effect: e, source: 'https://x', caught: [schema]}\n"
    )
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(
            f"component: {name}\nversion: '1'\nentries:\n{entry}"
        )
    with pytest.raises(InputError) as raised:
        failures.load(tmp_path)
    assert "'same' is also in a.yaml" in str(raised.value)
