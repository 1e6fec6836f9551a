"""Pod and Job templates inside custom resources: checked, but worded for when they fail.

The API server validates a custom resource against its CRD only; a pod template
inside a PyTorchJob, MPIJob, JobSet or training runtime is not pod-validated at
apply. An invalid one is accepted, and the pods (or Jobs) the operator creates
from it are rejected later: the job never starts and the reason is an event.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from trainops.admission.field import API, Problem
from trainops.admission.pods import Error

FIX = (
    "Fix the template: the operator copies it into the objects it creates, which the API "
    "server validates then, not at apply."
)


def later(
    errors: Iterable[Error], kind: str, creator: str, created: str = "pods"
) -> Iterator[Problem]:
    """Errors in a template of a `kind`, seen when `creator` creates `created` from it."""
    note = (
        f" (accepted at apply: the API server does not validate templates inside a {kind}; "
        f"it rejects the {created} {creator} creates from it, so the job never starts)"
    )
    for path, message in errors:
        yield Problem(API, path, message + note, FIX)
