"""go_regexp_error (policies/regexes.py) refuses what Go's regexp/syntax parser refuses and
nothing it accepts: each pattern's fate is Go's (regexp.Compile, RE2 syntax)."""

from __future__ import annotations

import pytest

from tests.support import REPO
from trainops.policy.settings import load_pack

load_pack(REPO / "policies")

from trainops_policies.regexes import go_regexp_error  # noqa: E402 (importable after load_pack)

GO_ACCEPTS = [
    "(?i)preempt(ed|ion)",
    "^gpu-a1-.*$",
    "a*?",
    "a+?b??",
    "[]a]",
    "[^]a]",
    "[[:alpha:]]+",
    r"\(literal\)",
    r"\*",
    "x|y",
    "(?:a|b)+",
    "(?i:node)-[0-9]{2}",
    "(?P<rack>rack-[0-9]+)",
    "",
]
GO_REFUSES = [
    ("(?i)preempt(ed|ion", "missing closing )"),
    ("*gpu-a1-*", "missing argument to repetition operator: *"),
    ("a**", "invalid nested repetition operator"),
    ("a+*", "invalid nested repetition operator"),
    ("a*??", "invalid nested repetition operator"),
    ("a)", "unexpected )"),
    ("[abc", "missing closing ]"),
    ("(|*)", "missing argument to repetition operator: *"),
    ("x|+y", "missing argument to repetition operator: +"),
    ("(?i)*", "missing argument to repetition operator: *"),
]


@pytest.mark.parametrize("pattern", GO_ACCEPTS)
def test_patterns_go_compiles_pass(pattern):
    assert go_regexp_error(pattern) is None


@pytest.mark.parametrize(("pattern", "message"), GO_REFUSES)
def test_patterns_go_refuses_are_refused_with_the_kind_of_gos_error(pattern, message):
    assert (go_regexp_error(pattern) or "").startswith(message)
