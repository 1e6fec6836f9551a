"""Multus attachments and NetworkAttachmentDefinition configs, as pods will see them.

A pod's `k8s.v1.cni.cncf.io/networks` annotation is either a comma list of
`[namespace/]name[@interface]` or a JSON list of `{"name", "namespace",
"interface"}`; attachments without an interface name become net1, net2...
in order. A NAD's `spec.config` is CNI JSON in a string: a single plugin
(`type`) or a chained list (`plugins`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
# Plugins that need an IPAM section to give the interface an address.
NEEDS_IPAM = {"macvlan", "ipvlan", "sriov", "ib-sriov", "host-device", "bridge", "vlan"}
RDMA_TYPES = {"sriov", "ib-sriov", "rdma"}


@dataclass(frozen=True)
class Attachment:
    name: str
    namespace: str
    interface: str


class AnnotationError(ValueError):
    pass


def attachments(value: str, pod_namespace: str) -> list[Attachment]:
    text = value.strip()
    entries: list[tuple[str, str, str | None]] = []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AnnotationError(f"not valid JSON: {exc.msg}") from None
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not item.get("name"):
                raise AnnotationError("every JSON entry needs a name")
            entries.append(
                (
                    str(item["name"]),
                    str(item.get("namespace") or pod_namespace),
                    item.get("interface"),
                )
            )
    else:
        for raw in (part.strip() for part in text.split(",")):
            if not raw:
                continue
            name, _, interface = raw.partition("@")
            namespace, _, bare = name.rpartition("/")
            entries.append((bare, namespace or pod_namespace, interface or None))
    result = []
    unnamed = 0
    for name, namespace, interface in entries:
        if not interface:
            unnamed += 1
            interface = f"net{unnamed}"
        result.append(Attachment(name, namespace, interface))
    return result


def interfaces(annotations: dict[str, Any], pod_namespace: str) -> list[str]:
    """Network interfaces the pod will have: lo, eth0 and one per attachment."""
    value = annotations.get(ANNOTATION)
    names = ["lo", "eth0"]
    if isinstance(value, str) and value.strip():
        with contextlib.suppress(AnnotationError):  # reported by multus-network-missing
            names += [a.interface for a in attachments(value, pod_namespace)]
    return names


def config(nad: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed CNI config, None) or (None, why it is invalid)."""
    raw = (nad.get("spec") or {}).get("config")
    if not isinstance(raw, str) or not raw.strip():
        return None, "spec.config is empty"
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"spec.config is not valid JSON: {exc.msg} (line {exc.lineno})"
    if not isinstance(parsed, dict):
        return None, "spec.config must be a JSON object"
    return parsed, None


def plugins(cni: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(cni.get("plugins"), list):
        return [p for p in cni["plugins"] if isinstance(p, dict)]
    return [cni]


def types(cni: dict[str, Any]) -> list[str]:
    return [str(p.get("type")) for p in plugins(cni) if p.get("type")]


def ipam(cni: dict[str, Any]) -> dict[str, Any] | None:
    for plugin in plugins(cni):
        if isinstance(plugin.get("ipam"), dict):
            return plugin["ipam"]
    return None


def ipam_ranges(section: dict[str, Any]) -> list[str]:
    """CIDRs an IPAM section hands out (whereabouts range, host-local subnets)."""
    out = []
    for key in ("range", "subnet"):
        if isinstance(section.get(key), str):
            out.append(section[key].split("-")[0] if "/" not in section[key] else section[key])
    for group in section.get("ranges") or []:
        for entry in group if isinstance(group, list) else [group]:
            if isinstance(entry, dict) and isinstance(entry.get("subnet"), str):
                out.append(entry["subnet"])
    return out
