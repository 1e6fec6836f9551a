"""`trainops policies list|explain`: what the policy pack checks and why."""

from __future__ import annotations

import difflib
import textwrap

import click

from trainops.cli.common import complete_rule_ids, project_config
from trainops.errors import InputError
from trainops.policy import SECURITY, registered
from trainops.policy.exemptions import EXEMPT_PREFIX
from trainops.policy.settings import PACK_MODULE, load_all
from trainops.rules import DOCTOR, RuleInfo, catalog


def _rules() -> dict[str, RuleInfo]:
    config = project_config()
    if config.policy_pack is None:
        raise InputError("no policy pack found (set policies in [tool.trainops])")
    load_all(config.policy_pack)
    return catalog()


@click.group()
def policies() -> None:
    """The training-aware policy pack that `trainops validate` runs."""


@policies.command("list")
def list_rules() -> None:
    """List every rule: id, default severity, what it checks (`explain` also knows the
    findings of `trainops doctor`)."""
    rules = sorted(
        (r for r in _rules().values() if r.category != DOCTOR),
        key=lambda r: (r.category != "builtin", r.id),
    )
    width = max(len(r.id) for r in rules)
    for rule in rules:
        click.echo(f"{rule.id:<{width}}  {rule.severity:<7}  {rule.title}")


@policies.command("explain")
@click.argument("rule_id", shell_complete=complete_rule_ids)
def explain(rule_id: str) -> None:
    """Explain RULE_ID: why it matters, how to fix it, how to exempt a resource."""
    rules = _rules()
    rule = rules.get(rule_id)
    if rule is None:
        close = difflib.get_close_matches(rule_id, list(rules), n=1)
        hint = f"; did you mean {close[0]}?" if close else " (see `trainops policies list`)"
        raise InputError(f"unknown rule {rule_id!r}{hint}")
    wrap = textwrap.TextWrapper(width=88, initial_indent="  ", subsequent_indent="  ")
    click.echo(f"{rule.id} ({rule.severity}): {rule.title}")
    if rule.kinds:
        click.echo(f"applies to: {', '.join(rule.kinds)}")
    click.echo("\nwhy:\n" + wrap.fill(rule.why))
    click.echo("\nfix:\n" + wrap.fill(rule.fix))
    if rule.when:
        click.echo("\nseverity:")
        for level, condition in rule.when:
            click.echo(wrap.fill(f"{level}: {condition}"))
    if rule.sources:
        click.echo("\nsources:\n" + "\n".join(f"  {url}" for url in rule.sources))
    defined = registered().get(rule.id)
    if defined is not None:
        module = defined.check.__module__.replace(PACK_MODULE, "policies", 1)
        click.echo(f"\ndefined in: {module.replace('.', '/')}.py")
    if rule.category == "policy":
        click.echo(
            "\nexempt one resource (with a reason):\n"
            f"  metadata.annotations: {{{EXEMPT_PREFIX}{rule.id}: <why this resource may>}}\n"
            "or, with an expiry date, in policies/config.yaml."
        )
    elif rule.category == SECURITY:
        click.echo(
            "\nsecurity rule: a resource cannot exempt itself. Exemptions come from\n"
            "policies/config.yaml (resources, reason, expiry), or from annotations on the\n"
            "paths its annotation-paths lists (never in a run)."
        )
