"""Exemptions: who may silence a rule for a resource, and how what they silence is shown.

The policy config's exemptions (policies/config.yaml, with a reason and an expiry) hold
for every rule, on the resources they name where those are rendered: under the paths the
exemption lists, or, when it lists none, anywhere but in a run (a run could otherwise
define an object with a platform component's kind, namespace and name and inherit its
exemptions). A resource's own `trainops.dev/exempt-<rule>` annotation holds for
ordinary rules, and for security rules only under a path the config lists (never in a
run): otherwise a change could open the gate that is checking it. Every exemption in
effect is reported as an `exemption-in-effect` info finding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from trainops import rules as catalog
from trainops.model import INFO, Document, Finding
from trainops.policy.registry import SECURITY, Rule
from trainops.render.discover import repository_root
from trainops.report import EXEMPTION_IN_EFFECT

if TYPE_CHECKING:
    from trainops.policy.context import Context
    from trainops.policy.settings import PolicySettings

EXEMPT_PREFIX = "trainops.dev/exempt-"

catalog.register(
    catalog.RuleInfo(
        id=EXEMPTION_IN_EFFECT,
        severity=INFO,
        title="Every exemption in effect is reported",
        why="An exemption hides a finding; reviewers must still see that it exists, why, "
        "and who granted it (the policy config, until a date, or an annotation).",
        fix="Fix the resource and drop the exemption when its reason no longer holds.",
    )
)


@dataclass(frozen=True)
class Exemption:
    rule: str
    reason: str
    resources: tuple[str, ...]  # resource ids; "*" matches any part
    expires: date | None = None
    where: str = "policy config"  # file:line that grants it, shown with every use
    # Repository-relative paths (each covers what is below it) of the renders it holds in;
    # none: every render but a run's.
    paths: tuple[str, ...] = ()

    def covers(self, resource: str, render_path: str | None, in_run: bool) -> bool:
        if self.paths:
            if render_path is None or not _under(render_path, self.paths):
                return False
        elif in_run:
            return False
        return any(_id_matches(pattern, resource) for pattern in self.resources)


def _under(relative: str, patterns: tuple[str, ...]) -> bool:
    return any(
        fnmatchcase(relative, pattern) or relative.startswith(pattern.rstrip("/") + "/")
        for pattern in patterns
    )


def _id_matches(pattern: str, resource: str) -> bool:
    want, have = pattern.split("/"), resource.split("/")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


def annotations_trusted(ctx: Context, settings: PolicySettings) -> bool:
    """Whether exemption annotations in this render may silence security rules: only
    when its path is one the platform's policy config lists, and never for a run."""
    if ctx.is_run or not settings.annotation_paths:
        return False
    relative = render_path(ctx)
    return relative is not None and _under(relative, settings.annotation_paths)


def render_path(ctx: Context) -> str | None:
    """The render's path relative to its repository (None outside one)."""

    def relative() -> str | None:
        path = Path(ctx.target.path)
        try:
            return path.resolve().relative_to(repository_root(path)).as_posix()
        except (ValueError, OSError, RuntimeError):
            return None

    return ctx.memo(("repository-path",), relative)


def granted(
    rule: Rule, doc: Document, settings: PolicySettings, ctx: Context
) -> tuple[str, str] | None:
    """(reason, who granted it) when an exemption covers `rule` on `doc`.

    The policy config's exemptions hold for every rule, where they say (module
    docstring). A resource's own annotation holds for ordinary rules, and for security
    rules only where the render's annotations are trusted: otherwise a change could open
    the gate that is checking it.
    """
    trusted = ctx.annotations_trusted
    for exemption in settings.exemptions:
        if exemption.rule == rule.id and exemption.covers(
            doc.resource_id, render_path(ctx) if exemption.paths else None, ctx.is_run
        ):
            until = f", until {exemption.expires.isoformat()}" if exemption.expires else ""
            return exemption.reason, f"{exemption.where}{until}"
    annotations = doc.metadata.get("annotations")
    reason = annotations.get(EXEMPT_PREFIX + rule.id) if isinstance(annotations, dict) else None
    if reason is None or not str(reason).strip():
        return None
    if rule.info.category == SECURITY and not trusted:
        return None
    return str(reason).strip(), f"annotation {EXEMPT_PREFIX}{rule.id}"


def exempted_finding(grant: tuple[str, str], silenced: list[Finding]) -> Finding:
    """One info finding per resource and rule for what an exemption (`grant`: its reason
    and who granted it) silenced."""
    reason, where = grant
    first = silenced[0]
    what = (
        first.message if len(silenced) == 1 else f"{len(silenced)} findings, first: {first.message}"
    )
    return replace(
        first,
        rule=EXEMPTION_IN_EFFECT,
        severity=INFO,
        message=f"{first.rule} exempted by {where}: {reason.rstrip('.')} (silences {what})",
        fix="",
    )
