"""Dynamic Resource Allocation (resource.k8s.io/v1): how pods name their device claims.

From Kubernetes' own code at v1.35: the core validation of a pod spec
(`validatePodResourceClaim`, `validateResourceClaimNames`) refuses a container claim that
names no entry of `spec.resourceClaims` and a pod claim that names neither a ResourceClaim
nor a template, or both; the API's defaulting turns a request's `count: 0` into one device;
the API server never checks a container claim's `request` against the claim's requests;
and the DRA allocator gives a claim one allocation, bound to one node when its devices are
node-local, shared by every pod that names the claim itself.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule, sets_any
from trainops.policy.pods import PodTemplate, mapping, pod_templates

CORE_VALIDATION = (
    "https://github.com/kubernetes/kubernetes/blob/000f26050b9be6fb3d79fae95e06b47fc96128cd/"
    "pkg/apis/core/validation/validation.go"
)
TYPES = "https://github.com/kubernetes/api/blob/v0.35.0/resource/v1/types.go"
ALLOCATOR = (
    "https://github.com/kubernetes/dynamic-resource-allocation/blob/v0.35.0/"
    "structured/internal/stable/allocator_stable.go#L1274-L1303"
)
# Device classes of node-local devices (the NVIDIA DRA driver's GPUs and MIG slices,
# v25.12.0 deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-*.yaml).
NODE_LOCAL_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"})


def _pod_claims(pod: PodTemplate) -> list[dict]:
    claims = pod.spec.get("resourceClaims")
    return [c for c in claims if isinstance(c, dict)] if isinstance(claims, list) else []


@pod_rule(
    id="dra-claim-reference",
    severity=ERROR,
    title="Pods name their device claims as the API server requires",
    why="A container's resources.claims[].name must be the name of an entry of the pod's "
    "spec.resourceClaims, and each entry names exactly one of resourceClaimName or "
    "resourceClaimTemplateName; the API server refuses the pod (and a Job, JobSet or "
    "training job's pods) otherwise, so the job never starts.",
    fix="Name each container claim after an entry of spec.resourceClaims, and give each entry "
    "one source: resourceClaimTemplateName for devices per pod, resourceClaimName for a "
    "claim shared on purpose.",
    applies=sets_any("resourceClaims", "resources"),
    source=CORE_VALIDATION,
)
def claim_reference(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    claims = _pod_claims(pod)
    names = {str(c.get("name")) for c in claims if c.get("name")}
    for index, claim in enumerate(claims):
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(k)]
        if len(sources) != 1:
            what = "both resourceClaimName and resourceClaimTemplateName" if sources else "neither"
            yield Violation(
                f"pod claim {claim.get('name')} sets {what}: the API server refuses the pod "
                "(exactly one of them must be set)",
                (*pod.path, "resourceClaims", index),
            )
    for key, index, container in pod.all_containers:
        wanted = mapping(container.get("resources")).get("claims")
        if not isinstance(wanted, list):
            continue
        for position, entry in enumerate(wanted):
            name = mapping(entry).get("name")
            if name and str(name) not in names:
                known = ", ".join(sorted(names)) or "none"
                yield Violation(
                    f"container {container.get('name')} uses claim {name}, which is not in the "
                    f"pod's spec.resourceClaims ({known}): the API server refuses the pod",
                    (*pod.path, key, index, "resources", "claims", position, "name"),
                )


@pod_rule(
    id="dra-shared-claim-replicas",
    severity=ERROR,
    title="Replicas get their own devices, not one shared claim",
    why="A ResourceClaim named directly (resourceClaimName) is allocated once and shared by "
    "every pod that names it; when its devices are local to a node (GPUs, MIG slices) the "
    "allocation is bound to that node, so every replica of a multi-node job must run there: "
    "the others stay Pending and the job never forms.",
    fix="Use resourceClaimTemplateName with a ResourceClaimTemplate, so each pod gets a claim "
    "(and devices) of its own.",
    applies=sets_any("resourceClaims"),
    source=ALLOCATOR,
    when={
        "error": "the claim is in the render and asks only for node-local device classes "
        "(NVIDIA GPUs, MIG slices), or is not in the render",
        "warning": "the claim asks for other device classes, which may not be node-local",
    },
)
def shared_claim(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    consumers = ctx.memo(("dra-consumers", id(pod.doc)), lambda: _consumers(pod))
    for index, claim in enumerate(_pod_claims(pod)):
        name = claim.get("resourceClaimName")
        if not name or consumers.get(str(name), 0) < 2:
            continue
        severity = ERROR
        shared = ctx.find("ResourceClaim", str(name), pod.doc.namespace or None)
        if shared is not None:
            classes = _device_classes(shared.obj)
            if classes and not classes <= NODE_LOCAL_CLASSES:
                severity = WARNING
        yield Violation(
            f"{consumers[str(name)]} pods of {pod.doc.kind} {pod.doc.name} share ResourceClaim "
            f"{name}: one allocation for all of them, bound to one node's devices",
            (*pod.path, "resourceClaims", index, "resourceClaimName"),
            severity=severity,
        )


def _consumers(pod: PodTemplate) -> dict[str, int]:
    """Pods of the document per ResourceClaim they name directly."""
    counts: dict[str, int] = {}
    for template in pod_templates(pod.doc):
        for claim in _pod_claims(template):
            name = claim.get("resourceClaimName")
            if name:
                counts[str(name)] = counts.get(str(name), 0) + (template.replicas or 1)
    return counts


def _device_classes(claim: dict) -> set[str]:
    found: set[str] = set()
    for request in _requests(mapping(claim.get("spec"))):
        exactly = mapping(mapping(request).get("exactly"))
        if exactly.get("deviceClassName"):
            found.add(str(exactly["deviceClassName"]))
        for option in mapping(request).get("firstAvailable") or []:
            if mapping(option).get("deviceClassName"):
                found.add(str(mapping(option)["deviceClassName"]))
    return found


@resource_rule(
    id="dra-request-count",
    severity=WARNING,
    title="Device requests ask for the number of devices they mean",
    why="In an ExactCount request (the default mode) a count of 0 or no count is defaulted to "
    "one device: a claim written for 'none yet' or left to be filled in allocates a device "
    "anyway, and one written for a whole node gets a single GPU.",
    fix="Give each exactly request the count of devices a pod needs (all of a node's GPUs: "
    "allocationMode: All).",
    kinds=("ResourceClaim", "ResourceClaimTemplate"),
    source=TYPES + "#L926-L937",
)
def request_count(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    base = ("spec",)
    if doc.kind == "ResourceClaimTemplate":
        spec, base = mapping(spec.get("spec")), ("spec", "spec")
    for index, request in enumerate(_requests(spec)):
        exactly = mapping(request.get("exactly"))
        mode = exactly.get("allocationMode", "ExactCount")
        if exactly and mode == "ExactCount" and exactly.get("count") in (None, 0):
            yield Violation(
                f"request {request.get('name')} asks for {exactly.get('count', 'no')} count: "
                "the API defaults it to one device",
                (*base, "devices", "requests", index, "exactly"),
            )


@pod_rule(
    id="dra-container-claim-request",
    severity=WARNING,
    title="A container's claim request names a request of its claim",
    why="A container may take one request of a claim (resources.claims[].request); the API "
    "server does not check that the claim or its template has a request of that name, so a "
    "misspelt one is accepted and the container is not given those devices.",
    fix="Use the name of one of the claim's spec.devices.requests (or leave request out to "
    "take every device of the claim).",
    applies=sets_any("resourceClaims"),
    source=TYPES.replace("resource/v1", "core/v1") + "#L2881-L2892",
)
def container_claim_request(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    by_name = {str(c.get("name")): c for c in _pod_claims(pod) if c.get("name")}
    for key, index, container in pod.all_containers:
        wanted = mapping(container.get("resources")).get("claims")
        for position, entry in enumerate(wanted if isinstance(wanted, list) else []):
            request = mapping(entry).get("request")
            claim = by_name.get(str(mapping(entry).get("name")))
            if not request or claim is None:
                continue
            names = _request_names(claim, pod, ctx)
            if names is not None and str(request) not in names:
                yield Violation(
                    f"container {container.get('name')} takes request {request} of claim "
                    f"{claim.get('name')}, which has no such request ({', '.join(sorted(names))})",
                    (*pod.path, key, index, "resources", "claims", position, "request"),
                )


def _requests(spec: dict) -> list[dict]:
    requests = mapping(spec.get("devices")).get("requests")
    return [r for r in requests if isinstance(r, dict)] if isinstance(requests, list) else []


def _request_names(claim: dict, pod: PodTemplate, ctx: Context) -> set[str] | None:
    """The request names of the claim or template a pod claim names, when it is rendered."""
    namespace = pod.doc.namespace or None
    if claim.get("resourceClaimTemplateName"):
        found = ctx.find(
            "ResourceClaimTemplate", str(claim["resourceClaimTemplateName"]), namespace
        )
        spec = mapping(mapping(found.obj.get("spec")).get("spec")) if found else None
    elif claim.get("resourceClaimName"):
        found = ctx.find("ResourceClaim", str(claim["resourceClaimName"]), namespace)
        spec = mapping(found.obj.get("spec")) if found else None
    else:
        return None
    if spec is None:
        return None
    return {str(r.get("name")) for r in _requests(spec) if r.get("name")}
