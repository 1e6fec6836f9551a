"""The later blind sets (tests/blind-2 and after) are well formed: each case holds a bad and
a good manifest that parse as Kubernetes objects (or component config files, which
have an apiVersion and kind too) and differ, metadata that says what
happens and what a validator should report, and a row in the set's SOURCES.tsv.

As for tests/blind, detection is measured (tests/blind/measure.py --set DIR), not asserted.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.support import REPO

SETS = sorted(p for p in (REPO / "tests").glob("blind-*") if p.is_dir())
CASES = [case for blind in SETS for case in sorted(blind.iterdir()) if case.name[:3].isdigit()]
FIELDS = {"source", "component", "version", "family", "what_happens", "expected", "why"}


def _documents(path: Path) -> list:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_there_are_later_sets_and_each_lists_its_cases():
    assert len(SETS) >= 5
    for blind in SETS:
        rows = (blind / "SOURCES.tsv").read_text().splitlines()
        listed = {row.split("\t")[0] for row in rows if row and not row.startswith("case\t")}
        cases = {case.name for case in CASES if case.parent == blind}
        assert len(cases) >= 40, blind.name
        assert listed == cases, f"{blind.name}: {sorted(listed ^ cases)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.parent.name}/{c.name[:3]}")
def test_case_manifests_and_metadata(case: Path):
    parsed = {}
    for name in ("bad.yaml", "good.yaml"):
        docs = _documents(case / name)
        assert docs, f"{case.name}/{name} has no document"
        for doc in docs:
            assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), name
        parsed[name] = docs
    assert parsed["bad.yaml"] != parsed["good.yaml"], case.name
    meta = yaml.safe_load((case / "case.yaml").read_text())
    assert set(meta) == FIELDS, f"{case.name}: {sorted(set(meta) ^ FIELDS)}"
    source = urlparse(meta["source"])
    assert source.scheme == "https" and source.netloc, meta["source"]
    assert meta["expected"] in {"error", "warning"}
    assert all(str(meta[key]).strip() for key in ("component", "version", "family", "why"))
