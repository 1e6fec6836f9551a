"""Input that reaches a report: keys, values and file names with newlines, terminal escape
sequences and characters XML refuses. Class: every output format prints what it was given
without letting it forge a line (a CI runner reads `::error` on any line of the log), drive
the terminal or break the document; JSON and SARIF escape by construction."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.hostile.harness import assert_handled, run_cli, write

FORGED = "::error file=README.md,line=1::forged"
# A label key and a data key carrying a newline, a forged workflow command, an escape
# sequence, a NUL-free C0 control, a C1 control and the Unicode line separator; a third
# key with bidirectional overrides and isolates (which reorder what a reader sees, as in
# CVE-2021-42574) and invisible characters (zero-width space and joiner, word joiner, BOM).
REORDERING = "\u202e\u2066\u2069\u200b\u200d\u2060\ufeff"
MANIFEST = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: default\n"
    "  labels:\n"
    '    "a\\n' + FORGED + '\\e[31m\\x07\\x85\\u2028": "b"\n'
    'data:\n  "k\\r\\n::warning::forged-too\\x0b": "v"\n'
    '  "safe\\u202e\\u2066\\u2069\\u200b\\u200d\\u2060\\ufeffkey": "v"\n'
)


@pytest.fixture
def forged(tmp_path):
    write(tmp_path / "forge.yaml", MANIFEST)
    return tmp_path


@pytest.mark.parametrize("fmt", ["text", "github", "junit"])
def test_no_input_forges_a_line_or_reaches_the_terminal(forged, fmt):
    outcome = run_cli("validate", "--no-cache", "--format", fmt, "forge.yaml", cwd=forged)
    assert_handled(outcome)
    assert outcome.code == 1  # the keys are invalid: the findings are there, escaped
    assert "forged" in outcome.out
    for line in outcome.out.splitlines():
        assert not line.lstrip().startswith("::") or line.startswith(
            ("::error file=forge.yaml", "::warning file=forge.yaml", "::notice file=forge.yaml")
        ), line
    assert not any(c in outcome.out for c in "\x1b\x07\x0b\r\x85\u2028" + REORDERING)
    assert "\\x1b" in outcome.out
    assert "safe\\u202e\\u2066\\u2069\\u200b\\u200d\\u2060\\ufeffkey" in outcome.out


def test_junit_stays_a_document_xml_parsers_read(forged):
    outcome = run_cli("validate", "--no-cache", "--format", "junit", "forge.yaml", cwd=forged)
    root = ET.fromstring(outcome.out)
    failures = [f.get("message") for f in root.iter("failure")]
    assert failures and "\\x1b" in (root.find(".//failure").text or "")


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_json_formats_keep_the_input_exactly(forged, fmt):
    outcome = run_cli("validate", "--no-cache", "--format", fmt, "forge.yaml", cwd=forged)
    assert_handled(outcome)
    assert FORGED + "\x1b" in outcome.out.encode().decode("unicode_escape")
    json.loads(outcome.out)
