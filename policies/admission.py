"""What the cluster's ValidatingAdmissionPolicies would refuse, found before it is applied.

`kubectl apply` reaches the API server without CI: the policies the platform
renders are its gate. This rule evaluates them offline on every object of the
render (with the cluster's platform: its policies, bindings, namespaces and
parameters), with the semantics of `trainops.admission.vap`.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.admission.vap import BINDING, POLICY, PolicySet
from trainops.model import ERROR, INFO, WARNING, Document
from trainops.policy import EVERY_KIND, Context, Violation, resource_rule


def _policies(ctx: Context) -> PolicySet:
    # A run's own policies, bindings, parameters and namespaces never reach the cluster (its
    # project syncs only jobs: run-kind-synced), so a run is judged by the platform's alone,
    # and no expression a run wrote is compiled or evaluated.
    own = {id(d) for d in ctx.documents} if ctx.is_run else set()

    def platform(*kinds: str) -> list:
        return [d for d in ctx.of_kind(*kinds) if id(d) not in own]

    found = platform(POLICY, BINDING)
    if not found:
        return PolicySet(())
    kinds = {
        str((d.obj.get("spec") or {}).get("paramKind", {}).get("kind", ""))
        for d in found
        if d.kind == POLICY and isinstance((d.obj.get("spec") or {}).get("paramKind"), dict)
    }
    others = platform("Namespace", *sorted(k for k in kinds if k))
    return PolicySet([d.obj for d in (*found, *others)])


@resource_rule(
    id="admission-policy",
    security=True,
    severity=ERROR,
    title="Objects pass the cluster's ValidatingAdmissionPolicies",
    why="The platform's admission policies hold what CI holds (a team's queue, the approved "
    "networks and registries, no privilege) for objects that reach the API server by any "
    "path; an object they deny is refused at apply, and Argo CD's sync of it fails.",
    fix="Change the object as the policy's message says (the message is the policy's own).",
    kinds=EVERY_KIND,
    render_needs=(POLICY, BINDING),
    source="https://github.com/kubernetes/api/blob/v0.35.0/admissionregistration/v1/types.go#L692",
    when={
        "error": "a binding's validationActions include Deny",
        "warning": "the binding only warns (Warn), or the policy cannot be evaluated here",
        "info": "the binding only audits (Audit)",
    },
)
def admission_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    policies = ctx.memo("admission-policies", lambda: _policies(ctx))
    if doc.kind == POLICY and doc.name in policies.problems:
        yield Violation(policies.problems[doc.name], ("spec",), severity=WARNING)
    if not policies:
        return
    for denial in policies.denials(doc.obj):
        if "Deny" in denial.actions:
            severity = ERROR
        elif "Warn" in denial.actions:
            severity = WARNING
        else:
            severity = INFO
        yield Violation(denial.text, (), severity=severity)
