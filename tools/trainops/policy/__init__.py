"""The rule API: what a policy rule author imports.

    from trainops.policy import Context, Violation, pod_rule, resource_rule, needs

A rule module registers its rules with the decorators (registry.py) and reads the
render through the Context (context.py); pod templates are PodTemplate (pods.py).
`load_all` imports a policy pack, after which the catalog (trainops.rules) holds every
rule trainops can report: the built-in checks, the pack's rules and the doctor's.
"""

from trainops.policy.context import Context
from trainops.policy.pods import PodTemplate
from trainops.policy.registry import (
    EVERY_KIND,
    SECURITY,
    Needs,
    Rule,
    Violation,
    needs,
    pod_rule,
    registered,
    render_rule,
    resource_rule,
    sets_any,
)
from trainops.policy.settings import load_all

__all__ = [
    "EVERY_KIND",
    "SECURITY",
    "Context",
    "Needs",
    "PodTemplate",
    "Rule",
    "Violation",
    "load_all",
    "needs",
    "pod_rule",
    "registered",
    "render_rule",
    "resource_rule",
    "sets_any",
]
