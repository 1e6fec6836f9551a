"""Whereabouts IPAM configs as whereabouts parses them: the range (a CIDR, or start-CIDR),
range_start and range_end, the gateway and the exclusions.

Facts: whereabouts v0.9.4 `pkg/config/config.go` (LoadIPAMConfig: a range is either a CIDR
or `<first IP>-<CIDR>` whose network holds the first IP; the gateway is a bare IP),
`pkg/types/types.go` (range_start and range_end are IPs decoded with the config's JSON: a
value that is not an IP fails the whole config) and `pkg/allocate/allocate.go` (each
exclude entry is a CIDR or a bare IP, else the allocation fails). The same section is the
spec.ipam string of the networks an operator turns into NADs (policies/sriov.py).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from typing import Any

from trainops import multus
from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

WHEREABOUTS = "https://github.com/k8snetworkplumbingwg/whereabouts/blob/v0.9.4/"
# Networks whose operator pastes spec.ipam into the NAD it writes (policies/sriov.py).
IPAM_STRING_KINDS = (
    "SriovNetwork",
    "SriovIBNetwork",
    "MacvlanNetwork",
    "IPoIBNetwork",
    "HostDeviceNetwork",
)
_TEMPLATE = re.compile(r"\{\{|\$\(|\$\{")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and bool(_TEMPLATE.search(value))


def _sloppy(text: str) -> str:
    """An IPv4 address with leading zeros as k8s' ParseIPSloppy reads it (decimal)."""
    parts = text.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        return ".".join(str(int(p)) for p in parts)
    return text


def parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """netutils.ParseIPSloppy: an IPv4 or IPv6 address, no prefix, no zone."""
    if "%" in text or "/" in text:
        return None
    try:
        return ipaddress.ip_address(_sloppy(text))
    except ValueError:
        return None


def parse_cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """netutils.ParseCIDRSloppy: <IP>/<prefix length>, host bits allowed."""
    address, slash, prefix = text.partition("/")
    ip = parse_ip(address)
    if not slash or ip is None or not prefix.isdigit():
        return None
    if int(prefix) > ip.max_prefixlen:
        return None
    return ipaddress.ip_network(f"{ip}/{int(prefix)}", strict=False)


def _range_problem(value: Any) -> str | None:
    """Why LoadIPAMConfig refuses a range (config.go L93-L121), None when it parses."""
    if not isinstance(value, str):
        return f"range {value!r} is not a string"
    first, dash, cidr = value.partition("-")
    if dash:
        start = parse_ip(first)
        if start is None:
            return f"range {value!r}: {first!r} is not an IP address (start-CIDR form)"
        network = parse_cidr(cidr)
        if network is None:
            return (
                f"range {value!r}: {cidr!r} is not a CIDR (write <first IP>-<CIDR>, e.g. "
                "10.40.0.10-10.40.0.0/16, or a CIDR with range_start and range_end)"
            )
        if start.version != network.version or start not in network:
            return f"range {value!r}: {start} is not in {network}"
        return None
    if parse_cidr(value) is None:
        return f"range {value!r} is not a CIDR (e.g. 10.40.0.0/16)"
    return None


def _section_problems(section: dict[str, Any]) -> Iterator[str]:
    ranges = [section, *dicts(section.get("ipRanges"))]
    for index, item in enumerate(ranges):
        where = "" if index == 0 else f"ipRanges[{index - 1}] "
        value = item.get("range")
        if value is not None and value != "" and not _templated(value):
            problem = _range_problem(value)
            if problem:
                yield where + problem
        for key in ("range_start", "range_end"):
            bound = item.get(key)
            if bound is None or bound == "" or _templated(bound):
                continue
            if not isinstance(bound, str) or parse_ip(bound) is None:
                yield f"{where}{key} {bound!r} is not an IP address: the config does not decode"
        excludes = item.get("exclude")
        for entry in excludes if isinstance(excludes, list) else []:
            if (
                isinstance(entry, str)
                and not _templated(entry)
                and parse_cidr(entry) is None
                and parse_ip(entry) is None
            ):
                yield f"{where}exclude entry {entry!r} is neither a CIDR nor an IP address"
    gateway = section.get("gateway")
    if (
        isinstance(gateway, str)
        and gateway
        and not _templated(gateway)
        and parse_ip(gateway) is None
    ):
        yield f"gateway {gateway!r} is not an IP address" + (
            " (no prefix length)" if "/" in gateway else ""
        )


def _whereabouts_sections(doc: Document) -> Iterator[tuple[dict[str, Any], tuple]]:
    if doc.kind == "NetworkAttachmentDefinition":
        cni, _ = multus.config(doc.obj)
        for plugin in multus.plugins(cni) if cni else []:
            section = mapping(plugin.get("ipam"))
            if section.get("type") == "whereabouts":
                yield section, ("spec", "config")
        return
    text = mapping(doc.obj.get("spec")).get("ipam")
    if not isinstance(text, str) or not text.strip() or _templated(text):
        return
    try:
        section = json.loads(text)
    except json.JSONDecodeError:
        return  # operator-network-cni-fields reports it
    if isinstance(section, dict) and section.get("type") == "whereabouts":
        yield section, ("spec", "ipam")


@resource_rule(
    id="whereabouts-config-invalid",
    severity=ERROR,
    title="Whereabouts IPAM sections have ranges, bounds, gateway and exclusions it parses",
    why="whereabouts parses its section on every allocation: a range is a CIDR, or "
    "<first IP>-<CIDR> whose network holds that IP (10.40.0.10-10.40.0.50, a start-end pair "
    "without a prefix, is refused); range_start and range_end are decoded as IPs with the "
    "config, so anything else fails the whole config; the gateway is a bare IP (not "
    "10.40.0.1/16); each exclude entry is a CIDR or an IP. Any of these makes every ADD "
    "fail, and every pod attaching the network stays in ContainerCreating.",
    fix="Write range as a CIDR (10.40.0.0/16) with range_start/range_end for a sub-range, "
    "the gateway as an IP, and exclusions as CIDRs (10.40.0.0/28) or IPs.",
    kinds=("NetworkAttachmentDefinition", *IPAM_STRING_KINDS),
    source=(
        WHEREABOUTS + "pkg/config/config.go#L93-L121",
        WHEREABOUTS + "pkg/config/config.go#L132-L138",
        WHEREABOUTS + "pkg/types/types.go#L41-L60",
        WHEREABOUTS + "pkg/allocate/allocate.go#L102-L110",
    ),
)
def whereabouts_config_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    for section, at in _whereabouts_sections(doc):
        for problem in _section_problems(section):
            yield Violation(f"whereabouts {problem}: every pod's address allocation fails", at)
