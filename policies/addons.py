"""Cluster agents with upstream's quick-start sizing that fails under training load."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import argv, resources
from trainops.profile.model import quantity_bytes

MULTUS_MIN_MEMORY = 256 * 2**20


def _bytes(value: object) -> int | None:
    try:
        return quantity_bytes(str(value))
    except ValueError:
        return None


@resource_rule(
    id="multus-memory-limit",
    severity=WARNING,
    title="The Multus thick daemon has room for gang starts",
    why="Multus' quick-start manifest limits the thick daemon to 50Mi. When a gang of "
    "training pods starts on a node at once it is OOM-killed (multus-cni#1346, #1416), and "
    "while it restarts every pod sandbox on the node fails.",
    fix="Raise the kube-multus container's memory limit (trainops: request 256Mi, limit 1Gi, no "
    "CPU limit).",
    kinds=("DaemonSet",),
)
def multus_memory(doc: Document, ctx: Context) -> Iterator[Violation]:
    template = (doc.obj.get("spec") or {}).get("template") or {}
    for index, container in enumerate((template.get("spec") or {}).get("containers") or []):
        image = str(container.get("image", ""))
        if "multus-cni" not in image or not any("multus-daemon" in w for w in argv(container)):
            continue
        limit = resources(container, "limits").get("memory")
        size = _bytes(limit) if limit is not None else None
        if size is not None and size < MULTUS_MIN_MEMORY:
            yield Violation(
                f"the Multus daemon's memory limit is {limit}: it is OOM-killed when many "
                "pods start on a node at once",
                ("spec", "template", "spec", "containers", index, "resources", "limits"),
            )
