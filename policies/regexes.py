"""Regular expressions that components compile with Go's regexp (RE2 syntax): JobSet's
failure-policy message patterns and Volcano HyperNode member selectors.

`go_regexp_error` reports only what Go's parser certainly refuses, whatever the dialect
details: a parenthesis or bracket left open or closed twice, and a repetition operator
with nothing to repeat (at the start, after '(' or '|', or after another repetition:
'*gpu*', 'a**'). JobSet v0.12.0 skips a pattern that does not compile
(`pkg/controllers/failure_policy.go` anyMatchFound logs "invalid regex" and goes on), so
its rule never applies; Volcano v1.13.3's HyperNode webhook refuses the HyperNode
(`pkg/webhooks/admission/hypernodes/validate/admit_hypernode.go`).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

JOBSET = "https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/controllers/failure_policy.go"
VOLCANO = (
    "https://github.com/volcano-sh/volcano/blob/v1.13.3/pkg/webhooks/admission/hypernodes/"
    "validate/admit_hypernode.go"
)
REPEAT = "*+?"


def _class_end(pattern: str, start: int) -> int | None:
    """Index of the ']' closing the character class opened at `start`, or None."""
    at = start + 1
    if pattern[at : at + 1] == "^":
        at += 1
    if pattern[at : at + 1] == "]":  # a leading ']' is a literal
        at += 1
    while at < len(pattern):
        if pattern[at] == "\\":
            at += 2
            continue
        if pattern.startswith("[:", at):
            close = pattern.find(":]", at + 2)
            if close < 0:
                return None
            at = close + 2
            continue
        if pattern[at] == "]":
            return at
        at += 1
    return None


def go_regexp_error(pattern: str) -> str | None:
    """Why Go's regexp.Compile refuses `pattern`, for the errors it certainly reports."""
    depth, at = 0, 0
    last = "start"  # what precedes: start, atom, repeat, lazy
    while at < len(pattern):
        char = pattern[at]
        if char == "\\":
            at, last = at + 2, "atom"
        elif char == "[":
            end = _class_end(pattern, at)
            if end is None:
                return "missing closing ]"
            at, last = end + 1, "atom"
        elif char == "(":
            depth += 1
            at += 1
            last = "start"
            if pattern[at : at + 1] == "?":  # flags (?i), (?i:...), named (?P<n>...)
                stop = at
                while stop < len(pattern) and pattern[stop] not in ":)":
                    stop += 1
                if stop < len(pattern) and pattern[stop] == ")":
                    depth -= 1
                at = stop + 1
        elif char == ")":
            if depth == 0:
                return "unexpected )"
            depth, at, last = depth - 1, at + 1, "atom"
        elif char == "|":
            at, last = at + 1, "start"
        elif char in REPEAT:
            if last == "start":
                return f"missing argument to repetition operator: {char}"
            if last == "lazy" or (last == "repeat" and char != "?"):
                return f"invalid nested repetition operator: {pattern[at - 1 : at + 1]}"
            at, last = at + 1, "lazy" if last == "repeat" else "repeat"
        else:
            at, last = at + 1, "atom"
    return "missing closing )" if depth else None


@resource_rule(
    id="jobset-failure-pattern",
    severity=ERROR,
    source=JOBSET + "#L166-L182",
    title="A JobSet failure-policy rule's message patterns are regular expressions Go compiles",
    why="JobSet matches onJobFailureMessagePatterns with Go's regexp when a child Job fails; "
    "a pattern that does not compile is logged ('invalid regex') and skipped, never "
    "refused. A rule written to restart on preemption without counting it then never "
    "applies: every preemption spends maxRestarts and the JobSet fails early.",
    fix="Write the pattern in Go's RE2 syntax (balanced parentheses, no leading '*'); test "
    "it with a Go regexp tester.",
    kinds=("JobSet",),
)
def jobset_failure_pattern(doc: Document, ctx: Context) -> Iterator[Violation]:
    rules = dicts(mapping(mapping(doc.obj.get("spec")).get("failurePolicy")).get("rules"))
    for index, rule in enumerate(rules):
        patterns = rule.get("onJobFailureMessagePatterns")
        for number, pattern in enumerate(patterns if isinstance(patterns, list) else []):
            problem = go_regexp_error(str(pattern))
            if problem:
                yield Violation(
                    f"rule {rule.get('name', index)!r}: pattern {pattern!r} does not compile "
                    f"({problem}): JobSet skips it, so the rule never applies",
                    (
                        "spec",
                        "failurePolicy",
                        "rules",
                        index,
                        "onJobFailureMessagePatterns",
                        number,
                    ),
                )


@resource_rule(
    id="volcano-hypernode-pattern",
    severity=ERROR,
    source=VOLCANO + "#L125-L134",
    title="A Volcano HyperNode's regexMatch pattern is a regular expression Go compiles",
    why="Volcano's HyperNode webhook compiles each member's regexMatch.pattern with Go's "
    "regexp and refuses the HyperNode when it does not compile (a shell glob such as "
    "'*gpu-*' starts with a repetition operator): the network tier it describes never "
    "exists, and jobs that require it stay pending.",
    fix="Write a regular expression (^gpu-a1-.*$), not a glob.",
    kinds=("HyperNode",),
)
def volcano_hypernode_pattern(doc: Document, ctx: Context) -> Iterator[Violation]:
    members = dicts(mapping(doc.obj.get("spec")).get("members"))
    for index, member in enumerate(members):
        pattern = mapping(mapping(member.get("selector")).get("regexMatch")).get("pattern")
        problem = go_regexp_error(str(pattern)) if pattern else None
        if problem:
            yield Violation(
                f"members[{index}] pattern {pattern!r} does not compile ({problem}): the "
                "webhook refuses the HyperNode",
                ("spec", "members", index, "selector", "regexMatch", "pattern"),
            )
