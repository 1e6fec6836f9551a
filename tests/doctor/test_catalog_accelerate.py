"""Accelerate's refusals to prepare a model placed for one process under a multi-process
launch: each catalogued message, as Accelerator.prepare raises it (whole, with a traceback's
prefix, in its earlier 8-bit-only wording), names model-placement-distributed."""

from __future__ import annotations

import re

import pytest

from tests.doctor.test_message_catalog import printed
from trainops.doctor import analysis, catalog
from trainops.doctor.expectation import Expectation
from trainops.doctor.lines import clean
from trainops.doctor.sources import memory_stream
from trainops.model import ERROR

ACCELERATE = [e for e in catalog.entries() if e.component == "accelerate"]


def test_accelerates_refusals_are_catalogued_at_pinned_releases():
    assert len(ACCELERATE) >= 4
    for entry in ACCELERATE:
        assert re.search(r"/huggingface/accelerate/blob/v[\d.]+/", entry.source), entry
        assert entry.finding == "model-placement-distributed" and entry.severity == ERROR


@pytest.mark.parametrize("entry", ACCELERATE, ids=[e.key[40:90] for e in ACCELERATE])
def test_each_refusal_as_raised_names_the_placement(entry):
    for text in (entry.key, *entry.former):
        line = f"ValueError: {printed(text)}"
        findings = analysis.diagnose([memory_stream("log", [line])], Expectation()).findings
        by_rule = {f.rule: f for f in findings}
        assert "model-placement-distributed" in by_rule, (line, sorted(by_rule))
        assert by_rule["model-placement-distributed"].severity == ERROR


def test_the_device_map_refusal_is_read_without_a_traceback():
    # Pasted on its own, with the rest of Accelerate's sentence after it.
    line = (
        "You can't train a model that has been loaded with `device_map='auto'` in any "
        "distributed mode. Please rerun your script specifying `--num_processes=1` or by "
        "launching with `python {{myscript.py}}`"
    )
    assert catalog.lookup(clean(line).text).finding == "model-placement-distributed"
    findings = analysis.diagnose([memory_stream("log", [line])], Expectation()).findings
    assert "model-placement-distributed" in {f.rule for f in findings}
