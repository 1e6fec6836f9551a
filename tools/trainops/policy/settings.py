"""Loads the policy pack (policies/*.py) and its settings (policies/config.yaml).

The settings file overrides severities and lists exemptions that expire:

    severity:
      nccl-debug-info: "off"          # error | warning | info | off
    exemptions:
    - rule: host-network
      resources: [DaemonSet/kube-system/kube-multus-ds]   # Kind/namespace/name, "*" = any
      reason: Multus configures the node's network namespace.
      expires: 2027-06-30
    annotation-paths:       # where resources may exempt themselves from security rules
    - base/operators        # repository-relative; a listed path covers what is below it
    security:               # where host access is an error although no team owns it
      enforce:
        paths: [base/operators]      # repository-relative globs
        namespaces: [prod-*]         # namespace globs

An unknown rule id or a malformed entry makes the file unreadable (exit 2,
with the line); an exemption past its date is an error finding and no longer
exempts anything. This file is the platform team's: exemptions from security
rules come from here (or from annotations under `annotation-paths`, never in a
run), so that a change cannot switch off the checks it is subject to.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.model import ERROR, SEVERITIES, Finding
from trainops.policy.exemptions import Exemption
from trainops.policy.posture import Enforcement
from trainops.policy.registry import registered
from trainops.render.discover import display_path
from trainops.yamlio import load_yaml_mapping, locate, read_text

PACK_MODULE = "trainops_policies"
KEYS = ("severity", "exemptions", "annotation-paths", "security")


@dataclass
class PolicySettings:
    severity: dict[str, str] = field(default_factory=dict)  # rule id -> severity or "off"
    exemptions: list[Exemption] = field(default_factory=list)  # only those still in force
    # Paths (repository-relative, globs) whose own exemption annotations may silence
    # security rules; a run is never one of them.
    annotation_paths: tuple[str, ...] = ()
    # Where host access is an error although no team owns the object (policy/posture.py).
    enforcement: Enforcement = field(default_factory=Enforcement)
    problems: list[Finding] = field(default_factory=list)  # about the settings themselves


# Modules that add entries of their own to the catalog when imported: the API server's
# and operators' checks, and the doctor's findings.
CATALOG_MODULES = (
    "trainops.admission",
    "trainops.doctor.analysis",
    "trainops.doctor.job",
    "trainops.doctor.nccl_tests",
)


def load_all(pack: Path) -> None:
    """Make the catalog (trainops.rules) complete: every built-in check, every finding of
    the doctor and every rule of the policy pack in `pack`."""
    for module in CATALOG_MODULES:
        importlib.import_module(module)
    load_pack(pack)


def load_pack(directory: Path) -> None:
    """Import every rule module of the pack; rules register themselves on import."""
    init = directory / "__init__.py"
    if not init.is_file():
        raise InputError("not a policy pack (no __init__.py)", str(directory))
    if PACK_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACK_MODULE, init, submodule_search_locations=[str(directory)]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACK_MODULE] = package
        spec.loader.exec_module(package)
    for path in sorted(directory.glob("*.py")):
        if path.name != "__init__.py":
            importlib.import_module(f"{PACK_MODULE}.{path.stem}")


def load_settings(path: Path | None, today: date | None = None) -> PolicySettings:
    if path is None or not path.is_file():
        return PolicySettings()
    where = str(path)
    text = read_text(path)
    data = load_yaml_mapping(text, where)
    known = registered()
    today = today or date.today()

    def fail(message: str, *at: Any) -> InputError:
        line = locate(text, tuple(at[:-1]), at[-1]) if at else None
        return InputError(message, where, line + 1 if line is not None else None)

    for key in data:
        if key not in KEYS:
            raise fail(f"unknown key {key!r} (expected {', '.join(KEYS)})", key)
    settings = PolicySettings()
    paths = data.get("annotation-paths") or []
    if not _relative_paths(paths):
        raise fail("annotation-paths: a list of repository-relative paths", "annotation-paths")
    settings.annotation_paths = tuple(p.strip().rstrip("/") for p in paths)
    settings.enforcement = _enforcement(data.get("security"), fail)
    severity = data.get("severity") or {}
    if not isinstance(severity, dict):
        raise fail("severity must map rule ids to error, warning, info or off", "severity")
    for rule_id, level in severity.items():
        if rule_id not in known:
            raise fail(f"severity: unknown rule {rule_id!r}", "severity", rule_id)
        if level not in (*SEVERITIES, "off"):
            raise fail(
                f"severity of {rule_id}: {level!r} is not error, warning, info or off",
                "severity",
                rule_id,
            )
        settings.severity[rule_id] = level
    exemptions = data.get("exemptions") or []
    if not isinstance(exemptions, list):
        raise fail("exemptions must be a list", "exemptions")
    for index, entry in enumerate(exemptions):
        line = locate(text, ("exemptions", index))
        granted_by = f"{display_path(path)}:{line + 1}" if line is not None else display_path(path)
        settings_entry = _exemption(entry, index, known, fail, granted_by)
        if settings_entry.expires is not None and settings_entry.expires < today:
            line = locate(text, ("exemptions", index), "expires")
            settings.problems.append(
                Finding(
                    rule="policy-exemption",
                    severity=ERROR,
                    source=where,
                    resource="",
                    path=f"exemptions[{index}]",
                    message=f"exemption from {settings_entry.rule} for "
                    f"{', '.join(settings_entry.resources)} expired on "
                    f"{settings_entry.expires.isoformat()}",
                    fix="Fix the resources, or renew the exemption with a new date and reason.",
                    file=where,
                    line=line + 1 if line is not None else None,
                )
            )
        else:
            settings.exemptions.append(settings_entry)
    return settings


def _relative_paths(paths: Any) -> bool:
    return isinstance(paths, list) and all(
        isinstance(p, str) and p.strip() and not p.startswith("/") and ".." not in p.split("/")
        for p in paths
    )


def _enforcement(security: Any, fail) -> Enforcement:
    """`security: {enforce: {paths: [...], namespaces: [...]}}`."""
    if security is None:
        return Enforcement()
    if not isinstance(security, dict) or set(security) - {"enforce"}:
        raise fail("security: a mapping with one key, enforce", "security")
    enforce = security.get("enforce") or {}
    if not isinstance(enforce, dict) or set(enforce) - {"paths", "namespaces"}:
        raise fail("security.enforce: a mapping of paths and namespaces", "security", "enforce")
    paths = enforce.get("paths") or []
    if not _relative_paths(paths):
        raise fail(
            "security.enforce.paths: a list of repository-relative paths", "security", "enforce"
        )
    namespaces = enforce.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(
        isinstance(n, str) and n.strip() for n in namespaces
    ):
        raise fail(
            "security.enforce.namespaces: a list of namespace names or globs",
            "security",
            "enforce",
        )
    return Enforcement(
        tuple(p.strip().rstrip("/") for p in paths), tuple(n.strip() for n in namespaces)
    )


def _exemption(entry: Any, index: int, known: dict, fail, where: str) -> Exemption:
    at = ("exemptions", index)
    if not isinstance(entry, dict):
        raise fail("an exemption is a mapping with rule, resources, reason, expires", *at)
    for key in entry:
        if key not in ("rule", "resources", "reason", "expires", "paths"):
            raise fail(f"exemption: unknown key {key!r}", *at, key)
    rule = entry.get("rule")
    if rule not in known:
        raise fail(f"exemption names unknown rule {rule!r}", *at, "rule")
    resources = entry.get("resources")
    if (
        not isinstance(resources, list)
        or not resources
        or not all(isinstance(r, str) and r.count("/") == 2 for r in resources)
    ):
        raise fail("exemption resources: a list of Kind/namespace/name", *at, "resources")
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise fail("exemption needs a reason", *at, "rule")
    expires = entry.get("expires")
    if expires is None:
        raise fail("exemption needs an expiry date (expires: YYYY-MM-DD)", *at, "rule")
    try:
        expiry = date.fromisoformat(str(expires))
    except ValueError:
        raise fail(f"expires: {expires!r} is not a date like 2027-06-30", *at, "expires") from None
    paths = entry.get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise fail("exemption paths: a list of repository-relative paths or globs", *at, "paths")
    return Exemption(
        rule,
        reason.strip(),
        tuple(resources),
        expiry,
        where,
        tuple(p.strip().rstrip("/") for p in paths),
    )
