"""Dynamic Resource Allocation (resource.k8s.io/v1): how pods name their device claims, what
the API server accepts in a claim's device requests, and ComputeDomains of the NVIDIA DRA
driver.

From Kubernetes' own code at v1.35: the core validation of a pod spec
(`validatePodResourceClaim`, `validateResourceClaimNames`) refuses a container claim that
names no entry of `spec.resourceClaims` and a pod claim that names neither a ResourceClaim
nor a template, or both; the resource API's validation (`validateDeviceClaim`) refuses
requests without exactly one of `exactly`/`firstAvailable`, counts that contradict their
allocation mode, constraints and config naming requests the claim lacks, and selectors the
DRA CEL compiler refuses (`device` has driver, attributes and capacity; a selector yields a
boolean); adminAccess needs a namespace labelled for it; the API's defaulting turns a
request's `count: 0` into one device; the API server never checks a container claim's
`request` against the claim's requests; claims and templates are found in the pod's own
namespace; and the DRA allocator gives a claim one allocation, bound to one node when its
devices are node-local, shared by every pod that names the claim itself. The NVIDIA DRA
driver (v25.12) creates each ComputeDomain's channel ResourceClaimTemplate itself, and its
compute-domain kubelet plugin strictly decodes and validates the opaque configs it prepares.
At v1.36 the allocator skips devices whose NoSchedule/NoExecute taints (DeviceTaintRules
included) a request does not tolerate.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule, sets_any
from trainops.policy.context import KnownNames
from trainops.policy.pods import PodTemplate, dicts, mapping, pod_templates

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
    "spec.resourceClaims, listed once per container; each entry has a name of its own and "
    "names exactly one of resourceClaimName or resourceClaimTemplateName; the API server "
    "refuses the pod (and a Job, JobSet or "
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
    seen: set[str] = set()
    for index, claim in enumerate(claims):
        if claim.get("name") and str(claim["name"]) in seen:
            yield Violation(
                f"pod claim {claim['name']} is listed twice: the API server refuses the pod",
                (*pod.path, "resourceClaims", index, "name"),
            )
        seen.add(str(claim.get("name")))
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
        taken: set[tuple[str, str]] = set()
        for position, entry in enumerate(wanted):
            name = mapping(entry).get("name")
            pair = (str(name), str(mapping(entry).get("request") or ""))
            if name and pair in taken:
                yield Violation(
                    f"container {container.get('name')} lists claim {name} twice: the API "
                    "server refuses the pod",
                    (*pod.path, key, index, "resources", "claims", position),
                )
            taken.add(pair)
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


# -- what the API server refuses in a claim's device requests (resource/v1 at v1.35) ----------

RESOURCE_VALIDATION = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/apis/resource/validation/"
    "validation.go"
)
DRA_CEL = "https://github.com/kubernetes/dynamic-resource-allocation/blob/v0.35.0/cel/compile.go"
ADMIN_ACCESS = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/registry/resource/utils.go"
)
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
CLAIM_CONTROLLER = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/controller/resourceclaim/"
    "controller.go"
)
COMPUTE_DOMAIN_TEMPLATES = (
    "https://github.com/NVIDIA/k8s-dra-driver-gpu/blob/v25.12.0/cmd/compute-domain-controller/"
    "resourceclaimtemplate.go#L159-L186"
)
# DeviceClasses the NVIDIA DRA driver's chart installs (v25.12.0, templates/deviceclass-*.yaml).
NVIDIA_CLASSES = frozenset(
    {
        *NODE_LOCAL_CLASSES,
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
    }
)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The fields of the `device` variable a selector sees (kubernetes.DRADevice).
DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})
# Functions of the Kubernetes CEL libraries, which the CEL runtime here does not declare: an
# expression using one is checked for syntax and device fields only.
K8S_FUNCTIONS = re.compile(
    r"\b(quantity|isQuantity|semver|isSemver|compareTo|isGreaterThan|isLessThan|asInteger|"
    r"asApproximateFloat|isInteger|sign|major|minor|patch|url|isURL|ip|isIP|cidr|isCIDR|format|"
    r"isSorted|sum|indexOf|lastIndexOf|find|findAll|bind|includes|intersects|equivalent)\s*\("
)
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_QUANTITY_ORDER = re.compile(
    r"device\.capacity\s*\[[^\]]*\]\s*(?:\.\s*\w+|\[[^\]]*\])\s*(<=|>=|<|>)"
    r"|(<=|>=|<|>)\s*device\.capacity\s*\[[^\]]*\]\s*(?:\.\s*\w+|\[[^\]]*\])"
    r"(?=\s*(?:\)|&&|\|\||\?|:|$))"
)
_CEL_ENV: Any = None


def _claim_spec(doc: Document) -> tuple[dict, tuple[str, ...]]:
    """A ResourceClaim's spec, or a ResourceClaimTemplate's spec.spec, and its path."""
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "ResourceClaimTemplate":
        return mapping(spec.get("spec")), ("spec", "spec")
    return spec, ("spec",)


def _device_requests(request: dict) -> Iterator[tuple[dict, tuple[Any, ...], str]]:
    """(exactly or sub-request, its path below the request, its name for references)."""
    if isinstance(request.get("exactly"), dict):
        yield request["exactly"], ("exactly",), str(request.get("name"))
    for index, sub in enumerate(request.get("firstAvailable") or []):
        if isinstance(sub, dict):
            yield sub, ("firstAvailable", index), f"{request.get('name')}/{sub.get('name')}"


def _reference_names(spec: dict) -> set[str]:
    """Names constraints and config may use: requests, and request/sub-request."""
    names: set[str] = set()
    for request in _requests(spec):
        names.add(str(request.get("name")))
        for sub in request.get("firstAvailable") or []:
            names.add(f"{request.get('name')}/{mapping(sub).get('name')}")
    return names


@resource_rule(
    id="dra-request-invalid",
    severity=ERROR,
    title="Device requests, constraints and config are what the API server accepts",
    why="The API server validates a claim's devices in Go code (validateDeviceClaim): each "
    "request sets exactly one of `exactly` and `firstAvailable`, a DNS-label name unique in "
    "the claim, and a deviceClassName that is a DNS subdomain (a device-plugin name such as "
    "nvidia.com/gpu is not); allocationMode All takes no count, ExactCount a positive one; "
    "device tolerations use operator Equal or Exists (Exists without a value); "
    "constraints name a matchAttribute with its domain and only requests of the claim, as "
    "config entries do. A claim or template that breaks one is refused, and the pods that "
    "need it never start.",
    fix="Correct the field as the finding says: one of exactly/firstAvailable, the name of a "
    "DeviceClass (gpu.nvidia.com), no count with allocationMode: All, matchAttribute as "
    "<domain>/<attribute>, request names that exist in the claim.",
    kinds=("ResourceClaim", "ResourceClaimTemplate"),
    source=RESOURCE_VALIDATION,
)
def request_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _claim_spec(doc)
    devices = (*base, "devices")
    seen: set[str] = set()
    for index, request in enumerate(_requests(spec)):
        at = (*devices, "requests", index)
        name = request.get("name")
        yield from _name_problems(name, "request", (*at, "name"), seen)
        has_exactly = isinstance(request.get("exactly"), dict)
        has_first = bool(request.get("firstAvailable"))
        if has_exactly == has_first:
            what = "both" if has_exactly else "neither"
            yield Violation(
                f"request {name} sets {what} of exactly and firstAvailable: exactly one is "
                "required",
                at,
            )
        subs: set[str] = set()
        for device, relative, _ in _device_requests(request):
            where = (*at, *relative)
            if relative[0] == "firstAvailable":
                yield from _name_problems(device.get("name"), "sub-request", (*where, "name"), subs)
            yield from _device_problems(device, where)
    names = _reference_names(spec)
    for section in ("constraints", "config"):
        entries = mapping(spec.get("devices")).get(section)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            entry = mapping(entry)
            at = (*devices, section, index)
            for position, wanted in enumerate(entry.get("requests") or []):
                if str(wanted) not in names:
                    yield Violation(
                        f"{section[:-1] if section == 'constraints' else section} names request "
                        f"{wanted}, which the claim does not have ({', '.join(sorted(names))})",
                        (*at, "requests", position),
                    )
            if section == "constraints":
                attribute = entry.get("matchAttribute") or entry.get("distinctAttribute")
                if not attribute:
                    yield Violation("constraint without matchAttribute", at)
                elif "/" not in str(attribute):
                    yield Violation(
                        f"matchAttribute {attribute} has no domain: it must be fully qualified "
                        "(<domain>/<attribute>, e.g. gpu.nvidia.com/pcieRoot)",
                        (*at, "matchAttribute"),
                    )
            elif not mapping(entry.get("opaque")).get("driver"):
                yield Violation("config entry without opaque.driver", (*at, "opaque"))


def _name_problems(name: Any, what: str, at: tuple, seen: set[str]) -> Iterator[Violation]:
    if not name:
        yield Violation(f"{what} without a name", at)
        return
    if len(str(name)) > 63 or not _DNS_LABEL.fullmatch(str(name)):
        yield Violation(f"{what} name {name!r} is not a DNS label", at)
    if str(name) in seen:
        yield Violation(f"{what} name {name} appears twice", at)
    seen.add(str(name))


def _device_problems(device: dict, at: tuple) -> Iterator[Violation]:
    device_class = device.get("deviceClassName")
    if not device_class:
        yield Violation("deviceClassName is required", at)
    elif len(str(device_class)) > 253 or not _DNS_SUBDOMAIN.fullmatch(str(device_class)):
        yield Violation(
            f"deviceClassName {device_class!r} is not a DeviceClass name (a DNS subdomain)",
            (*at, "deviceClassName"),
        )
    mode = device.get("allocationMode", "ExactCount")
    count = device.get("count")
    if mode == "All" and count not in (None, 0):
        yield Violation(
            f"count {count} with allocationMode All: count must not be set", (*at, "count")
        )
    elif mode == "ExactCount" and isinstance(count, int) and count < 0:
        yield Violation(f"count {count} must be greater than zero", (*at, "count"))
    elif mode not in ("All", "ExactCount"):
        yield Violation(
            f"allocationMode {mode!r} is not one of All, ExactCount", (*at, "allocationMode")
        )
    for index, selector in enumerate(device.get("selectors") or []):
        if not mapping(mapping(selector).get("cel")).get("expression"):
            yield Violation("selector without cel.expression", (*at, "selectors", index))
    for index, toleration in enumerate(device.get("tolerations") or []):
        toleration = mapping(toleration)
        where = (*at, "tolerations", index)
        operator = toleration.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            yield Violation(f"toleration operator {operator} is not Equal or Exists", where)
        elif operator == "Exists" and toleration.get("value"):
            yield Violation("toleration with operator Exists must have no value", where)
        effect = toleration.get("effect")
        if effect and effect not in ("NoSchedule", "NoExecute", "None"):
            yield Violation(f"toleration effect {effect} is not NoSchedule or NoExecute", where)


@resource_rule(
    id="dra-selector-cel",
    severity=ERROR,
    title="Device selectors are CEL expressions the API server compiles",
    why="The API server compiles every selectors[].cel.expression of a claim or DeviceClass "
    "against the `device` variable (driver, attributes, capacity) and refuses the object "
    "when it does not compile or does not yield a boolean: a syntax error (= for ==), a "
    "name other than device (attributes[...] alone), a field device does not have "
    "(device.attribute, device.model), or a capacity compared with < or > (a quantity has "
    "no such operator; use compareTo or isGreaterThan).",
    fix='Write the selector as device.attributes["<domain>"].<name> == <value> (or '
    'device.capacity["<domain>"].<name>.compareTo(quantity("40Gi")) >= 0).',
    kinds=("ResourceClaim", "ResourceClaimTemplate", "DeviceClass"),
    source=(RESOURCE_VALIDATION, DRA_CEL + "#L145-L176"),
)
def selector_cel(doc: Document, ctx: Context) -> Iterator[Violation]:
    for expression, at in _selectors(doc):
        problem = _cel_problem(expression)
        if problem:
            yield Violation(f"selector {expression!r}: {problem}", at)


def _selectors(doc: Document) -> Iterator[tuple[str, tuple[Any, ...]]]:
    if doc.kind == "DeviceClass":
        found = [(mapping(doc.obj.get("spec")), ("spec",))]
    else:
        spec, base = _claim_spec(doc)
        found = [
            (device, (*base, "devices", "requests", index, *relative))
            for index, request in enumerate(_requests(spec))
            for device, relative, _ in _device_requests(request)
        ]
    for holder, at in found:
        for index, selector in enumerate(holder.get("selectors") or []):
            expression = mapping(mapping(selector).get("cel")).get("expression")
            if isinstance(expression, str) and expression.strip():
                yield expression, (*at, "selectors", index, "cel", "expression")


@functools.lru_cache(maxsize=4096)
def _cel_problem(expression: str) -> str | None:
    """Why the API server would not compile a selector, or None."""
    global _CEL_ENV
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_optional, ext_strings

    if _CEL_ENV is None:
        _CEL_ENV = cel.NewEnv(
            variables={"device": cel.Type.DYN},
            extensions=[ext_strings.ExtStrings(2), ext_optional.ExtOptional()],
        )
    bare = _STRING.sub('""', expression)
    for name in re.findall(r"\bdevice\s*\.\s*([A-Za-z_]\w*)", bare):
        if name not in DEVICE_FIELDS:
            return f"device has no field {name} (it has {', '.join(sorted(DEVICE_FIELDS))})"
    if _QUANTITY_ORDER.search(bare):
        return "a capacity is a quantity, which has no < or > operator (use compareTo)"
    try:
        compiled = _CEL_ENV.compile(expression)
    except Exception as exc:  # the CEL runtime reports compile errors as RuntimeError
        message = str(exc)
        if "Syntax error" in message or not K8S_FUNCTIONS.search(bare):
            detail = message.split("ERROR: ", 1)[-1].split("\n", 1)[0]
            return f"does not compile ({detail})"
        return None
    kind = str(compiled.return_type()).rsplit(".", 1)[-1]
    if kind not in ("BOOL", "DYN"):
        return f"yields {kind.lower()}, not a boolean"
    return None


@resource_rule(
    id="dra-device-class-exists",
    severity=WARNING,
    title="Device requests name a DeviceClass the cluster has",
    why="A request's deviceClassName must name an existing DeviceClass; the scheduler cannot "
    "allocate a claim whose class does not exist, and its pods stay Pending. When the render "
    "defines the cluster's DeviceClasses, a name among neither them nor the NVIDIA DRA "
    "driver's (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, compute-domain-*) is "
    "most likely misspelt.",
    fix="Name one of the DeviceClasses the cluster defines, or add the DeviceClass.",
    kinds=("ResourceClaim", "ResourceClaimTemplate"),
    render_needs=("DeviceClass",),
)
def device_class_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not ctx.of_kind("DeviceClass"):
        return  # the render does not say which classes the cluster has
    spec, base = _claim_spec(doc)
    for index, request in enumerate(_requests(spec)):
        for device, relative, _ in _device_requests(request):
            name = device.get("deviceClassName")
            if not isinstance(name, str) or not name or name in NVIDIA_CLASSES:
                continue
            if ctx.find("DeviceClass", name) is None:
                known = ctx.memo(
                    "device-class-names",
                    lambda: KnownNames.of([*NVIDIA_CLASSES, *ctx.known_names("DeviceClass").first]),
                )
                yield Violation(
                    f"DeviceClass {name} is not in the render (it has {known})",
                    (*base, "devices", "requests", index, *relative, "deviceClassName"),
                )


@resource_rule(
    id="dra-admin-access-namespace",
    severity=ERROR,
    title="Claims with adminAccess live in a namespace labelled for it",
    why="A request with adminAccess: true is accepted only in a namespace labelled "
    f'{ADMIN_LABEL}: "true" (AuthorizedForAdmin); elsewhere the API server refuses the '
    "claim or template.",
    fix=f'Label the namespace {ADMIN_LABEL}: "true" (only for monitoring namespaces), or '
    "drop adminAccess.",
    kinds=("ResourceClaim", "ResourceClaimTemplate"),
    source=ADMIN_ACCESS,
)
def admin_access_namespace(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not doc.namespace:
        return
    spec, base = _claim_spec(doc)
    for index, request in enumerate(_requests(spec)):
        exactly = mapping(request.get("exactly"))
        if exactly.get("adminAccess") is not True:
            continue
        namespace = ctx.find("Namespace", doc.namespace)
        if namespace is None:
            return
        label = mapping(namespace.metadata.get("labels")).get(ADMIN_LABEL)
        if str(label) != "true":
            yield Violation(
                f"request {request.get('name')} sets adminAccess, but Namespace "
                f'{doc.namespace} is not labelled {ADMIN_LABEL}: "true"',
                (*base, "devices", "requests", index, "exactly", "adminAccess"),
            )


@pod_rule(
    id="dra-claim-namespace",
    severity=ERROR,
    title="Pods name claims and claim templates of their own namespace",
    why="A pod's resourceClaimTemplateName and resourceClaimName are looked up in the pod's "
    "namespace (the resourceclaim controller and the scheduler read only that namespace): a "
    "template or claim that exists in another namespace, or a ComputeDomain's channel "
    "template made in another namespace, is not found and the pod stays Pending.",
    fix="Create the ResourceClaimTemplate (or the ComputeDomain) in the namespace of the job.",
    applies=sets_any("resourceClaims"),
    source=CLAIM_CONTROLLER,
)
def claim_namespace(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    namespace = pod.doc.namespace
    if not namespace:
        return
    made = ctx.memo("compute-domain-templates", lambda: _channel_templates(ctx))
    for index, claim in enumerate(_pod_claims(pod)):
        for key, kind in (
            ("resourceClaimTemplateName", "ResourceClaimTemplate"),
            ("resourceClaimName", "ResourceClaim"),
        ):
            name = claim.get(key)
            if not isinstance(name, str) or not name:
                continue
            if ctx.find(kind, name, namespace) is not None:
                continue
            by_name = ctx.memo(("dra-namespaces", kind), lambda k=kind: _namespaces(ctx, k))
            elsewhere = sorted(by_name.get(name, ()))
            if kind == "ResourceClaimTemplate":
                if namespace in made.get(name, ()):
                    continue
                elsewhere = sorted({*elsewhere, *made.get(name, ())})
            if elsewhere:
                yield Violation(
                    f"{kind} {name} is in namespace {', '.join(elsewhere)}, not in the pod's "
                    f"namespace {namespace}",
                    (*pod.path, "resourceClaims", index, key),
                )


@pod_rule(
    id="dra-claim-template-exists",
    severity=WARNING,
    title="Pods name a ResourceClaimTemplate the render defines",
    why="No claim is made for a pod whose resourceClaimTemplateName names no template of its "
    "namespace, and the pod stays Pending. When the render defines the namespace's claim "
    "templates (or ComputeDomains that make them) and none has the name, it is most likely "
    "misspelt or left over from a rename.",
    fix="Name one of the namespace's ResourceClaimTemplates (or the channel template of its "
    "ComputeDomain).",
    applies=sets_any("resourceClaims"),
    render_needs=("ResourceClaimTemplate", "ComputeDomain"),
)
def claim_template_exists(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    namespace = pod.doc.namespace
    if not namespace:
        return
    made = ctx.memo("compute-domain-templates", lambda: _channel_templates(ctx))
    written = ctx.memo(
        ("dra-namespaces", "ResourceClaimTemplate"),
        lambda: _namespaces(ctx, "ResourceClaimTemplate"),
    )
    here = ctx.memo("dra-templates-by-namespace", lambda: _names_by_namespace(written, made)).get(
        namespace
    )
    if not here:
        return  # the namespace's templates come from elsewhere
    for index, claim in enumerate(_pod_claims(pod)):
        name = claim.get("resourceClaimTemplateName")
        if not isinstance(name, str) or not name or name in here:
            continue
        if name in written or name in made:
            continue  # in another namespace: dra-claim-namespace says so
        yield Violation(
            f"ResourceClaimTemplate {name} is not in the render (namespace {namespace} has "
            f"{KnownNames.of(here)})",
            (*pod.path, "resourceClaims", index, "resourceClaimTemplateName"),
        )


def _names_by_namespace(*placed: dict[str, set[str]]) -> dict[str, set[str]]:
    """Namespace -> names, from name -> namespaces maps."""
    out: dict[str, set[str]] = {}
    for names in placed:
        for name, spaces in names.items():
            for space in spaces:
                out.setdefault(space, set()).add(name)
    return out


def _namespaces(ctx: Context, kind: str) -> dict[str, set[str]]:
    """Name -> namespaces of the documents of `kind` in the render."""
    found: dict[str, set[str]] = {}
    for doc in ctx.of_kind(kind):
        if doc.namespace:
            found.setdefault(doc.name, set()).add(doc.namespace)
    return found


def _channel_templates(ctx: Context) -> dict[str, set[str]]:
    """Channel ResourceClaimTemplate name -> namespaces whose ComputeDomains make it."""
    found: dict[str, set[str]] = {}
    for domain in ctx.of_kind("ComputeDomain"):
        name = _channel_template(domain)
        if name and domain.namespace:
            found.setdefault(name, set()).add(domain.namespace)
    return found


def _channel_template(domain: Document) -> str | None:
    channel = mapping(mapping(domain.obj.get("spec")).get("channel"))
    name = mapping(channel.get("resourceClaimTemplate")).get("name")
    return str(name) if name else None


@resource_rule(
    id="computedomain-template-taken",
    severity=ERROR,
    title="A ComputeDomain's channel template name is its own",
    why="The NVIDIA DRA driver's compute-domain controller creates the ResourceClaimTemplate "
    "named in spec.channel.resourceClaimTemplate.name in the ComputeDomain's namespace; when "
    "a ResourceClaimTemplate of that name already exists there (written in Git, or made by "
    "another ComputeDomain) the create fails, the ComputeDomain is never set up, and pods "
    "naming the template get a template without the domain's IMEX channel.",
    fix="Give each ComputeDomain a channel template name of its own and do not write that "
    "ResourceClaimTemplate yourself: the controller makes it.",
    kinds=("ComputeDomain",),
    source=COMPUTE_DOMAIN_TEMPLATES,
)
def computedomain_template_taken(doc: Document, ctx: Context) -> Iterator[Violation]:
    name = _channel_template(doc)
    if not name:
        return
    at = ("spec", "channel", "resourceClaimTemplate", "name")
    written = ctx.find("ResourceClaimTemplate", name, doc.namespace or None)
    if written is not None and written.namespace == doc.namespace:
        yield Violation(
            f"ResourceClaimTemplate {name} is also written in the render: the controller's "
            "create fails",
            at,
        )
    first = ctx.memo("compute-domain-first", lambda: _first_domains(ctx)).get((doc.namespace, name))
    if first is not None and first is not doc:
        yield Violation(f"ComputeDomain {first.name} already names channel template {name}", at)


def _first_domains(ctx: Context) -> dict[tuple[str, str], Document]:
    """(namespace, channel template name) -> the first ComputeDomain naming it."""
    found: dict[tuple[str, str], Document] = {}
    for domain in ctx.of_kind("ComputeDomain"):
        name = _channel_template(domain)
        if name:
            found.setdefault((domain.namespace, name), domain)
    return found


NVIDIA_CONFIG = "https://github.com/NVIDIA/k8s-dra-driver-gpu/blob/v25.12.0/"
NVIDIA_VALIDATE = NVIDIA_CONFIG + "api/nvidia.com/resource/v1beta1/validate.go#L26-L101"
NVIDIA_PREPARE = NVIDIA_CONFIG + "cmd/gpu-kubelet-plugin/device_state.go#L600-L705"
# The configs the GPU kubelet plugin applies (device_state.go: any other kind fails).
NVIDIA_CONFIG_KINDS = frozenset({"GpuConfig", "MigDeviceConfig", "VfioDeviceConfig"})
SHARING_GATES = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}
TIME_SLICES = frozenset({"Default", "Short", "Medium", "Long"})
# The device classes the driver's chart installs, by the devices they select.
DRIVER_DEVICE_TYPES = {"gpu.nvidia.com": "full GPUs", "mig.nvidia.com": "MIG devices"}
NVIDIA_SHARING = NVIDIA_CONFIG + "api/nvidia.com/resource/v1beta1/sharing.go"


@resource_rule(
    id="nvidia-dra-gpu-config",
    severity=ERROR,
    title="Opaque config for the NVIDIA DRA driver is a GpuConfig the driver accepts",
    why="The NVIDIA DRA driver (v25.12) decodes a claim's opaque config for gpu.nvidia.com "
    "strictly (apiVersion resource.nvidia.com/v1beta1, kind GpuConfig, MigDeviceConfig, "
    "VfioDeviceConfig) and validates it when it prepares the devices: a sharing strategy "
    "other than TimeSlicing or MPS, a time-slice interval other than Default, Short, Medium "
    "or Long, an MPS defaultActiveThreadPercentage outside 0-100, a timeSlicingConfig beside "
    "MPS, or a GpuConfig for a request of the mig.nvidia.com class (a MigDeviceConfig for "
    "gpu.nvidia.com) fails the preparation and the pod never starts. Both strategies also "
    "need the driver's alpha feature gates "
    "(TimeSlicingSettings, MPSSupport), off by default.",
    fix="Use kind GpuConfig with sharing.strategy TimeSlicing (interval Default|Short|"
    "Medium|Long) or MPS (defaultActiveThreadPercentage 0-100), and enable the matching "
    "feature gate in the driver's Helm values.",
    kinds=("ResourceClaim", "ResourceClaimTemplate", "DeviceClass"),
    source=(NVIDIA_VALIDATE, NVIDIA_PREPARE, NVIDIA_SHARING),
    when={
        "error": "the driver refuses the config whatever its feature gates",
        "warning": "the sharing strategy needs a feature gate that is off by default",
    },
)
def nvidia_gpu_config(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind == "DeviceClass":
        entries, at = mapping(doc.obj.get("spec")).get("config"), ("spec", "config")
        classes: dict[str, str] = {}
    else:
        spec, base = _claim_spec(doc)
        entries, at = mapping(spec.get("devices")).get("config"), (*base, "devices", "config")
        classes = _request_classes(mapping(spec.get("devices")))
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        opaque = mapping(mapping(entry).get("opaque"))
        parameters = opaque.get("parameters")
        if opaque.get("driver") != "gpu.nvidia.com" or not isinstance(parameters, dict):
            continue
        where = (*at, index, "opaque", "parameters")
        yield from _gpu_config_problems(parameters, where)
        yield from _config_device_type(mapping(entry), classes, parameters, where)


def _request_classes(devices: dict) -> dict[str, str]:
    """Each request's device class: `exactly.deviceClassName` (resource.k8s.io/v1) or
    `deviceClassName` (v1beta1)."""
    classes = {}
    for request in dicts(devices.get("requests")):
        name = request.get("deviceClassName") or mapping(request.get("exactly")).get(
            "deviceClassName"
        )
        if request.get("name") and name:
            classes[str(request["name"])] = str(name)
    return classes


def _config_device_type(
    entry: dict, classes: dict[str, str], parameters: dict, at: tuple
) -> Iterator[Violation]:
    """The plugin applies a config only to devices of its type (device_state.go,
    validateDeviceConfigType): a GpuConfig to full GPUs, a MigDeviceConfig to MIG devices;
    the driver's own device classes say which a request gets."""
    kind = parameters.get("kind")
    wanted = {"GpuConfig": "gpu.nvidia.com", "MigDeviceConfig": "mig.nvidia.com"}.get(str(kind))
    requests = entry.get("requests")
    for name in requests if wanted and isinstance(requests, list) else []:
        device_class = classes.get(str(name))
        if device_class in DRIVER_DEVICE_TYPES and device_class != wanted:
            yield Violation(
                f"a {kind} for request {name}, whose device class {device_class} gives "
                f"{DRIVER_DEVICE_TYPES[device_class]}: the driver cannot apply it and the "
                "pod never starts",
                (*at, "kind"),
            )
            return


def _gpu_config_problems(parameters: dict, at: tuple) -> Iterator[Violation]:
    kind, version = parameters.get("kind"), parameters.get("apiVersion")
    if version != "resource.nvidia.com/v1beta1" or kind not in NVIDIA_CONFIG_KINDS:
        yield Violation(
            f"parameters of apiVersion {version} kind {kind}: the driver decodes only "
            f"resource.nvidia.com/v1beta1 {', '.join(sorted(NVIDIA_CONFIG_KINDS))}",
            at,
        )
        return
    sharing = parameters.get("sharing")
    if kind not in ("GpuConfig", "MigDeviceConfig") or not isinstance(sharing, dict):
        return
    strategy = sharing.get("strategy")
    if strategy not in SHARING_GATES:
        yield Violation(
            f"sharing strategy {strategy!r} is not TimeSlicing or MPS", (*at, "sharing", "strategy")
        )
        return
    yield Violation(
        f"sharing strategy {strategy} works only with the driver's {SHARING_GATES[strategy]} "
        "feature gate on (alpha, off by default)",
        (*at, "sharing", "strategy"),
        severity=WARNING,
    )
    interval = mapping(sharing.get("timeSlicingConfig")).get("interval")
    if strategy == "TimeSlicing" and interval is not None and interval not in TIME_SLICES:
        yield Violation(
            f"time-slice interval {interval!r} is not one of {', '.join(sorted(TIME_SLICES))}",
            (*at, "sharing", "timeSlicingConfig", "interval"),
        )
    if strategy == "MPS" and kind == "GpuConfig" and sharing.get("timeSlicingConfig") is not None:
        yield Violation(
            "a timeSlicingConfig beside the MPS strategy: the driver refuses the sharing "
            "settings (GetMpsConfig) and the pod never starts",
            (*at, "sharing", "timeSlicingConfig"),
        )
    percentage = mapping(sharing.get("mpsConfig")).get("defaultActiveThreadPercentage")
    if strategy == "MPS" and isinstance(percentage, int) and not 0 <= percentage <= 100:
        yield Violation(
            f"defaultActiveThreadPercentage {percentage} is outside 0-100",
            (*at, "sharing", "mpsConfig", "defaultActiveThreadPercentage"),
        )


# -- opaque config for the ComputeDomain driver (NVIDIA DRA driver v25.12) ---------------------

CD_DRIVER = "compute-domain.nvidia.com"
CD_CONFIG_KINDS = frozenset({"ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"})
CD_CLASS = "compute-domain-default-channel.nvidia.com"
CD_CLASSES = frozenset({CD_CLASS, "compute-domain-daemon.nvidia.com"})
CD_PREPARE = NVIDIA_CONFIG + "cmd/compute-domain-kubelet-plugin/device_state.go#L335-L367"
CD_DECODE = NVIDIA_CONFIG + "cmd/compute-domain-kubelet-plugin/device_state.go#L713-L770"
CD_SCHEME = NVIDIA_CONFIG + "api/nvidia.com/resource/v1beta1/api.go#L64-L98"
CD_VALIDATE = NVIDIA_CONFIG + "api/nvidia.com/resource/v1beta1/computedomainconfig.go#L49-L86"


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "$(" in value)


@resource_rule(
    id="nvidia-dra-computedomain-config",
    severity=ERROR,
    title="Opaque config for compute-domain.nvidia.com is a ComputeDomain config with a domainID",
    why="The NVIDIA DRA driver's compute-domain kubelet plugin (v25.12) strictly decodes a "
    "claim's opaque config for compute-domain.nvidia.com and accepts only "
    "resource.nvidia.com/v1beta1 ComputeDomainChannelConfig or ComputeDomainDaemonConfig "
    "('runtime object is not a recognized configuration' otherwise); their Validate refuses "
    "an empty domainID ('domainID cannot be empty'). Preparing the claim fails and the pod "
    "never starts.",
    fix="Let the ComputeDomain make its channel ResourceClaimTemplate (spec.channel."
    "resourceClaimTemplate.name) instead of writing the config; a hand-written one needs "
    "kind ComputeDomainChannelConfig and domainID set to the ComputeDomain's UID.",
    kinds=("ResourceClaim", "ResourceClaimTemplate", "DeviceClass"),
    source=(CD_PREPARE, CD_DECODE, CD_SCHEME, CD_VALIDATE),
)
def computedomain_config(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind == "DeviceClass":
        entries, at = mapping(doc.obj.get("spec")).get("config"), ("spec", "config")
        selects = doc.name in CD_CLASSES or CD_DRIVER in str(doc.obj.get("spec"))
        classes = {"": CD_CLASS} if selects else {}
    else:
        spec, base = _claim_spec(doc)
        entries, at = mapping(spec.get("devices")).get("config"), (*base, "devices", "config")
        classes = _request_classes(mapping(spec.get("devices")))
    if not CD_CLASSES & set(classes.values()):
        return  # no compute-domain device is prepared for it: the plugin never sees the config
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        opaque = mapping(mapping(entry).get("opaque"))
        parameters = opaque.get("parameters")
        if opaque.get("driver") != CD_DRIVER or not isinstance(parameters, dict):
            continue
        where = (*at, index, "opaque", "parameters")
        kind, version = parameters.get("kind"), parameters.get("apiVersion")
        if _templated(kind) or _templated(version):
            continue
        # Every config of the driver is decoded strictly, whatever requests it names.
        if version != "resource.nvidia.com/v1beta1" or kind not in NVIDIA_API_KINDS:
            yield Violation(
                f"parameters of apiVersion {version} kind {kind}: the compute-domain plugin "
                "cannot decode them and fails to prepare the claim",
                where,
            )
            continue
        if kind in CD_CONFIG_KINDS:
            unknown = sorted(set(parameters) - CD_CONFIG_FIELDS[str(kind)])
            if unknown:
                yield Violation(
                    f"{kind} has unknown field {', '.join(unknown)}: the plugin's strict "
                    "decoding refuses it and the claim is never prepared",
                    (*where, unknown[0]),
                )
                continue
        if not _applies_to_domain(mapping(entry), classes):
            continue  # applied to no compute-domain device: never validated
        if kind not in CD_CONFIG_KINDS:
            yield Violation(
                f"a {kind} for compute-domain devices: the plugin accepts only "
                f"{', '.join(sorted(CD_CONFIG_KINDS))} ('not a recognized configuration') "
                "and fails to prepare the claim",
                (*where, "kind"),
            )
            continue
        domain = parameters.get("domainID")
        if domain is None or domain == "":
            yield Violation(
                f"{kind} without a domainID: the plugin's Validate refuses it ('domainID cannot "
                "be empty') and the claim is never prepared",
                (*where, "domainID") if "domainID" in parameters else where,
            )


# Kinds the driver's config scheme decodes (api.go, AddKnownTypes) and the fields of the
# compute-domain configs (computedomainconfig.go: TypeMeta inline, domainID, allocationMode).
NVIDIA_API_KINDS = frozenset(
    {*NVIDIA_CONFIG_KINDS, *CD_CONFIG_KINDS, "ComputeDomain", "ComputeDomainClique"}
)
CD_CONFIG_FIELDS = {
    "ComputeDomainChannelConfig": frozenset({"apiVersion", "kind", "domainID", "allocationMode"}),
    "ComputeDomainDaemonConfig": frozenset({"apiVersion", "kind", "domainID"}),
}


def _applies_to_domain(entry: dict, classes: dict[str, str]) -> bool:
    """Whether a config is applied to a compute-domain device: it names no requests (all of
    them), or a request of the driver's compute-domain classes."""
    requests = entry.get("requests")
    if not isinstance(requests, list) or not requests:
        return True
    return any(classes.get(str(name).split("/", 1)[0]) in CD_CLASSES for name in requests)


# -- device taints: DeviceTaintRules against a claim's tolerations (resource.k8s.io 1.36) ------

DRA_136 = "https://github.com/kubernetes/dynamic-resource-allocation/blob/kubernetes-1.36.2/"
TOLERATES_TAINT = DRA_136 + "resourceclaim/devicetoleration.go#L35-L56"
TAINT_ALLOCATION = DRA_136 + "structured/internal/stable/allocator_stable.go#L1153-L1231"
TAINT_SELECTOR = (
    "https://github.com/kubernetes/api/blob/v0.36.2/resource/v1alpha3/types.go#L226-L295"
)
# The driver whose devices each of the NVIDIA DRA driver's DeviceClasses selects (v25.12.0,
# templates/deviceclass-*.yaml: `device.driver == '...'`).
CLASS_DRIVERS = {
    "gpu.nvidia.com": "gpu.nvidia.com",
    "mig.nvidia.com": "gpu.nvidia.com",
    "vfio.gpu.nvidia.com": "gpu.nvidia.com",
    "compute-domain-daemon.nvidia.com": CD_DRIVER,
    "compute-domain-default-channel.nvidia.com": CD_DRIVER,
}
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates_taint(toleration: dict, taint: dict) -> bool:
    """resourceclaim.ToleratesTaint: effect, key, then Equal (value must match, an absent
    value is "") or Exists (any value)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return str(toleration.get("value") or "") == str(taint.get("value") or "")
    return operator == "Exists"


def _driver_wide_taints(ctx: Context) -> dict[str | None, list[tuple[str, dict]]]:
    """Driver (None: every driver) -> (DeviceTaintRule name, taint) of the rules in the
    render that taint every device of that driver with a taint that blocks allocation."""
    found: dict[str | None, list[tuple[str, dict]]] = {}
    for rule in ctx.of_kind("DeviceTaintRule"):
        spec = mapping(rule.obj.get("spec"))
        selector = spec.get("deviceSelector")
        taint = spec.get("taint")
        if not isinstance(selector, dict) or not isinstance(taint, dict):
            continue  # without a selector no device is tainted
        if set(selector) - {"driver"} or taint.get("effect") not in BLOCKING_EFFECTS:
            continue  # a pool, a device or a tombstoned field: not every device
        driver = selector.get("driver")
        if not isinstance(taint.get("key"), str) or any(
            _templated(v) for v in (driver, taint.get("key"), taint.get("value"))
        ):
            continue
        if driver is not None and not isinstance(driver, str):
            continue
        found.setdefault(driver or None, []).append((rule.name, taint))
    return found


@resource_rule(
    id="dra-device-taint-untolerated",
    severity=ERROR,
    title="Device requests tolerate the DeviceTaintRules that taint all their devices",
    why="A DeviceTaintRule taints every device its deviceSelector matches; a selector naming "
    "only a driver (or empty) matches all of that driver's devices. The scheduler's "
    "allocator does not allocate a device with a NoSchedule or NoExecute taint that none of "
    "the request's tolerations tolerates (ToleratesTaint: operator Equal needs the same "
    "value, an absent value matching only an empty one; Exists matches any value), so a "
    "request of the NVIDIA driver's classes that tolerates no such taint is never allocated "
    "and its pods stay Pending (NoExecute also evicts running ones).",
    fix="Add a toleration for the taint to the request (exactly.tolerations: key, operator "
    "Exists or Equal with the taint's value, effect), or narrow the DeviceTaintRule to the "
    "pools or devices it means.",
    kinds=("ResourceClaim", "ResourceClaimTemplate"),
    source=(TAINT_ALLOCATION, TOLERATES_TAINT, TAINT_SELECTOR),
    render_needs=("DeviceTaintRule",),
)
def device_taint_untolerated(doc: Document, ctx: Context) -> Iterator[Violation]:
    taints = ctx.memo("dra-driver-wide-taints", lambda: _driver_wide_taints(ctx))
    if not taints:
        return
    spec, base = _claim_spec(doc)
    for index, request in enumerate(_requests(spec)):
        blocked: list[tuple[tuple[Any, ...], str, str, dict]] = []
        alternatives = list(_device_requests(request))
        for device, relative, _ in alternatives:
            device_class = device.get("deviceClassName")
            driver = CLASS_DRIVERS.get(str(device_class))
            if driver is None:
                break  # a class of unknown devices: cannot say
            tolerations = [mapping(t) for t in device.get("tolerations") or []]
            if any(_templated(v) for t in tolerations for v in t.values()):
                break
            for name, taint in (*taints.get(driver, ()), *taints.get(None, ())):
                if not any(tolerates_taint(t, taint) for t in tolerations):
                    blocked.append((relative, str(device_class), name, taint))
                    break
            else:
                break  # this alternative can be allocated
        else:
            if not alternatives or len(blocked) != len(alternatives):
                continue
            relative, device_class, name, taint = blocked[0]
            shown = f"{taint.get('key')}={taint.get('value') or ''}:{taint.get('effect')}"
            who = f"request {request.get('name')} (class {device_class})"
            if len(alternatives) > 1:
                who = f"no alternative of request {request.get('name')} ({device_class}, ...)"
            verb = "tolerates" if len(alternatives) > 1 else "does not tolerate"
            yield Violation(
                f"{who} {verb} taint {shown} "
                f"of DeviceTaintRule {name}, which taints every device of its driver: the "
                "scheduler allocates no device and the pods stay Pending",
                (
                    *base,
                    "devices",
                    "requests",
                    index,
                    *(relative if len(alternatives) == 1 else ()),
                ),
            )
