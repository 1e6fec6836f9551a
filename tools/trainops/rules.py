"""The catalog of rule ids trainops reports, with the text reports need.

Built-in checks (schema, rendering) register here; the policy pack registers
its rules through the same `register` call, so SARIF rule metadata, JUnit
messages and the generated documentation all read one catalog.

The severity contract (docs/policies.md): a rule reports `error` only where a cited,
pinned source (an upstream code line or a versioned document, in `sources`) shows that
the cluster refuses the object or that the workload fails, hangs, loses data or runs
silently wrong; `warning` is for degradation and risk, `info` for advice. A rule that
reports more than one severity says when it reports each (`when`);
tests/test_severity_contract.py holds every registered rule to it (`RuleInfo.problems`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainops.model import ERROR, SEVERITIES, WARNING


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: str
    title: str
    why: str
    fix: str
    kinds: tuple[str, ...] = field(default=())
    category: str = "builtin"
    # Pinned citations for the error claim: URLs at a tag or commit (a code line where
    # there is one) or a versioned document. Required wherever the rule can report error.
    sources: tuple[str, ...] = field(default=())
    # (severity, the condition under which the rule reports it), for a rule that reports
    # more than one severity; empty: always `severity`.
    when: tuple[tuple[str, str], ...] = field(default=())

    @property
    def can_error(self) -> bool:
        """Whether any of this rule's findings may be an error."""
        return self.severity == ERROR or any(level == ERROR for level, _ in self.when)

    def problems(self) -> list[str]:
        """What keeps this entry from the severity contract (empty when it holds)."""
        found = []
        levels = [self.severity, *(level for level, _ in self.when)]
        found += [f"unknown severity {level!r}" for level in levels if level not in SEVERITIES]
        if self.when and self.severity not in dict(self.when):
            found.append(f"`when` does not say when it reports its default {self.severity}")
        if self.can_error and not self.sources:
            found.append("reports error but cites no source")
        found += [f"source is not pinned: {url}" for url in self.sources if not pinned(url)]
        return found


# A ref that moves: a citation at one of these says nothing about the release it checks.
_MOVING_REFS = {"main", "master", "HEAD", "head", "develop", "trunk", "latest", "stable"}
_GITHUB_REF = re.compile(r"^https://github\.com/[^/]+/[^/]+/(?:blob|tree)/([^/]+)/\S+$")
_VERSIONED = re.compile(
    r"(?:^|[/@_=-])v?\d+\.\d+(?:\.\d+)?(?:[/#._-]|$)|/[0-9a-f]{40}/|^https://v\d+-\d+\."
)


def pinned(url: str) -> bool:
    """Whether `url` names one release of what it cites: a GitHub file at a tag or commit,
    another URL naming a version (docs of one release, a tagged page), or a page of this
    repository's docs/ (a posture the project declares, versioned with the rules)."""
    if url.startswith("docs/") and ".." not in url:
        return url.split("#", 1)[0].endswith(".md")
    if not url.startswith("https://"):
        return False
    github = _GITHUB_REF.match(url)
    if github:
        return github.group(1) not in _MOVING_REFS
    return bool(_VERSIONED.search(url))


DOCTOR = "doctor"  # the category of the findings `trainops doctor` prints

_CATALOG: dict[str, RuleInfo] = {}


def register(info: RuleInfo) -> RuleInfo:
    existing = _CATALOG.get(info.id)
    if existing is not None and existing != info:
        raise ValueError(f"rule id {info.id!r} registered twice")
    _CATALOG[info.id] = info
    return info


def catalog() -> dict[str, RuleInfo]:
    return dict(_CATALOG)


def lookup(rule_id: str) -> RuleInfo | None:
    return _CATALOG.get(rule_id)


register(
    RuleInfo(
        id="schema",
        severity=ERROR,
        title="Object matches the strict schema of its kind",
        why="The API server rejects objects with unknown fields, wrong types or missing "
        "required fields at apply time, after the change is merged and Argo CD is "
        "already syncing.",
        fix="Correct the field named in the finding; for a kind with no schema, import its "
        "CRD with `trainops schemas import`.",
        # Wrong types and missing required fields are refused; an unknown field is refused
        # under kubectl's strict field validation and otherwise dropped (silently wrong).
        sources=(
            "https://github.com/kubernetes/apiserver/blob/v0.35.0/pkg/endpoints/handlers/create.go#L121",
            "https://github.com/kubernetes/apiserver/blob/v0.35.0/pkg/endpoints/handlers/rest.go#L409",
        ),
    )
)
register(
    RuleInfo(
        id="argocd-source-override",
        severity=WARNING,
        title="No Argo CD parameter override file beside a kustomization or plain manifests",
        why="Argo CD's repo server merges .argocd-source.yaml and "
        ".argocd-source-<application>.yaml from an Application's path into its source "
        "before it builds: kustomize patches, name prefixes, images, labels and "
        "annotations, or another source type altogether. What Argo CD syncs is then not "
        "what validate rendered; in a run, it can rename the job onto another run's or add "
        "the Replace=true sync option, past every check.",
        fix="Delete the file and put what it changes in the kustomization.",
        when=(
            (ERROR, "in a run: its pull request must not ship what validate cannot see"),
            (WARNING, "elsewhere"),
        ),
        sources=(
            "https://github.com/argoproj/argo-cd/blob/v3.5.1/reposerver/repository/repository.go#L1866-L1918",
            "docs/security.md#what-a-run-can-and-cannot-do",
        ),
    )
)
register(
    RuleInfo(
        id="remote-resource",
        severity=WARNING,
        title="Remote kustomize resources have an offline copy",
        why="Without network (CI), a remote base can only be rendered from a mirror; "
        "what it contains is otherwise not validated at all. In a run, Argo CD would sync "
        "whatever the remote holds then, past every check a run's pull request meets.",
        fix="Add the pinned upstream to the mirror directory (--remote-mirror) or render "
        "with --allow-network.",
        when=(
            (ERROR, "in a run: its pull request must not ship what validate cannot see"),
            (WARNING, "elsewhere"),
        ),
        sources=("docs/security.md#what-a-run-can-and-cannot-do",),
    )
)
