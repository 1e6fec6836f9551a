"""Exemption annotations: each names a real rule and gives a reason."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import WARNING, Document
from trainops.policy import EVERY_KIND, SECURITY, Context, Violation, registered, resource_rule
from trainops.policy.exemptions import EXEMPT_PREFIX


def exemption_annotations_present(doc: Document) -> bool:
    """Documents with annotations (where an exemption annotation could be)."""
    return bool(doc.metadata.get("annotations"))


@resource_rule(
    id="policy-exemption",
    severity="error",
    title="Exemption annotations name a real rule and give a reason",
    why="An exemption silences a finding a reviewer would otherwise see; one without a "
    "reason cannot be reviewed, and one naming no rule silences nothing (usually a typo).",
    fix="Write `trainops.dev/exempt-<rule-id>: <why this resource may break the rule>` with a "
    "rule id from `trainops policies list`.",
    kinds=EVERY_KIND,
    applies=exemption_annotations_present,
    when={
        "error": "an exemption in policies/config.yaml has expired: the platform's own "
        "configuration says its date is the end of the exemption",
        "warning": "an annotation names no rule, gives no reason, or cannot exempt from a "
        "security rule",
    },
    source="docs/policies.md#policy-exemption",
)
def exemption_annotations(doc: Document, ctx: Context) -> Iterator[Violation]:
    annotations = doc.metadata.get("annotations")
    for key, value in annotations.items() if isinstance(annotations, dict) else ():
        if not str(key).startswith(EXEMPT_PREFIX):
            continue
        rule_id = str(key)[len(EXEMPT_PREFIX) :]
        path = ("metadata", "annotations", key)
        rules = registered()
        if rule_id not in rules:
            yield Violation(f"exemption names unknown rule {rule_id!r}", path, severity=WARNING)
        elif not str(value).strip():
            yield Violation(f"exemption from {rule_id} gives no reason", path, severity=WARNING)
        elif rules[rule_id].info.category == SECURITY and not ctx.annotations_trusted:
            yield Violation(
                f"{rule_id} is a security rule: an annotation here does not exempt from it",
                path,
                fix="Ask the platform team for an exemption in policies/config.yaml (with a "
                "reason and an expiry), or fix the resource.",
                severity=WARNING,
            )
