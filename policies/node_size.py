"""A GPU pod fits the GPU nodes: its CPU and memory requests against a node's allocatable.

The node size comes from the render: the `trainops-runs` ConfigMap of the pod's namespace
carries nodeCpu and nodeMemory where the cluster profile declares nodeAllocatable
(`trainops.profile.tenancy.params`). A pod's request is what the scheduler computes
(component-helpers v0.35.0 `resource/helpers.go` PodRequests): the containers' requests
summed (a limit where the request is unset, as the API server defaults it), restartable
init containers (sidecars) added, each other init container's request as a floor, and
the pod's overhead on top.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from trainops import quantity
from trainops.model import ERROR
from trainops.policy import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, mapping, resources
from trainops.profile.tenancy import NODE_CPU, NODE_MEMORY

from . import common
from .tenancy import params

FIT = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/scheduler/framework/plugins/"
    "noderesources/fit.go"
)
SIZED = ("cpu", "memory")


def _requests(container: dict) -> dict[str, Fraction]:
    limits, requests = resources(container, "limits"), resources(container, "requests")
    out = {}
    for name in SIZED:
        value = quantity.parse(requests.get(name, limits.get(name)))
        if value:
            out[name] = value
    return out


def pod_requests(pod: PodTemplate) -> dict[str, Fraction]:
    """CPU (cores) and memory (bytes) the scheduler reserves for one pod of the template."""
    total = {name: Fraction(0) for name in SIZED}
    for container in pod.containers:
        for name, value in _requests(container).items():
            total[name] += value
    sidecars = {name: Fraction(0) for name in SIZED}
    floor = {name: Fraction(0) for name in SIZED}
    for container in pod.spec.get("initContainers") or []:
        if not isinstance(container, dict):
            continue
        wanted = _requests(container)
        if container.get("restartPolicy") == "Always":
            for name, value in wanted.items():
                sidecars[name] += value
        else:
            for name in SIZED:
                floor[name] = max(floor[name], wanted.get(name, 0) + sidecars[name])
    overhead = mapping(pod.spec.get("overhead"))
    for name in SIZED:
        total[name] = max(total[name] + sidecars[name], floor[name])
        total[name] += quantity.parse(overhead.get(name)) or 0
    return total


def _shown(name: str, amount: Fraction) -> str:
    if name == "memory":
        return f"{float(amount) / 2**30:g}Gi"
    return f"{float(amount):g}"


@pod_rule(
    id="pod-fits-node",
    severity=ERROR,
    source=FIT,
    title="A GPU pod requests no more CPU and memory than a GPU node offers",
    why="The scheduler places a pod only on a node whose allocatable CPU and memory hold its "
    "requests (NodeResourcesFit: 'Insufficient cpu', 'Insufficient memory'). A training pod "
    "sized above the cluster's GPU nodes stays Pending on every node, and its gang never "
    "starts: the job waits forever, or until Kueue's waitForPodsReady evicts it again and "
    "again.",
    fix="Lower the pod's requests (cpuPerPod and memoryPerPod in cluster.yaml, or the run's "
    "resources) below the node's allocatable, or correct nodeAllocatable to what `kubectl "
    "get node NODE -o jsonpath='{.status.allocatable}'` reports.",
    applies=common.gpu_pod,
    render_needs=("ConfigMap",),
)
def pod_fits_node(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    found = params(ctx, pod.doc.namespace)
    if not found or NODE_CPU not in found or NODE_MEMORY not in found:
        return
    node = {"cpu": quantity.parse(found[NODE_CPU]), "memory": quantity.parse(found[NODE_MEMORY])}
    wanted = pod_requests(pod)
    for name in SIZED:
        offered = node[name]
        if offered and wanted[name] > offered:
            yield Violation(
                f"each {pod.role or 'pod'} requests {_shown(name, wanted[name])} {name}, more "
                f"than a GPU node offers ({_shown(name, offered)}, the profile's "
                f"nodeAllocatable): it never schedules (Insufficient {name})",
                pod.path,
            )
