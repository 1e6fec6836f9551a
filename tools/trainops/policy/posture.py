"""Security by declared posture: how serious host access is depends on who ships the
object and what the platform declared for where it lives.

Host access (host namespaces and paths, privileged containers, added capabilities,
another service account) is graded per object, for the rules registered with
`by_posture=True`:
- error for a run or a team's workload (a run directory, or a namespace the cluster's
  tenancy parameters give to a team): a run's pull request must not get root on a GPU
  node (docs/security.md);
- error where policies/config.yaml declares `security: enforce` for the object's path or
  namespace;
- info for a node agent: a DaemonSet outside the teams' namespaces that mounts the
  kubelet's, the runtime's, CNI, device-plugin or driver paths, which is what such
  agents are for;
- warning elsewhere: nothing declared a posture, so the finding says what the access
  grants and how to declare one.
What the API server itself refuses (a namespace's Pod Security `enforce` level, a
ValidatingAdmissionPolicy) is an error by its own rules, whatever the posture.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from trainops.model import ERROR, INFO, SEVERITIES, WARNING, Document
from trainops.policy.context import Context
from trainops.policy.exemptions import render_path
from trainops.policy.pods import dicts, mapping
from trainops.profile.tenancy import PARAMS

# Host paths node agents mount: the kubelet (device plugins, pod resources, plugins),
# the container runtimes and CDI, CNI binaries and configuration, drivers and kernel
# interfaces.
AGENT_PATHS = (
    "/var/lib/kubelet",
    "/var/log",
    "/opt/cni",
    "/etc/cni",
    "/var/lib/cni",
    "/run/containerd",
    "/var/run/containerd",
    "/run/crio",
    "/var/run/crio",
    "/var/run/cdi",
    "/etc/cdi",
    "/run/cdi",
    "/run/nvidia",
    "/var/run/nvidia",
    "/usr/local/nvidia",
    "/etc/nvidia",
    "/run/mellanox",
    "/run/netns",
    "/var/run/netns",
    "/dev",
    "/sys",
    "/proc",
    "/lib/modules",
    "/usr/lib/modules",
    "/run/udev",
    "/etc/kubernetes",
    "/var/run/docker.sock",
    "/run/systemd",
    "/var/run/dbus",
    "/run/dbus",
)

# What a rule graded by posture declares (`when=POSTURE, source=THREAT_MODEL`).
POSTURE = {
    "error": "in a run or a team's namespace, or where policies/config.yaml says "
    "`security: enforce` for the object's path or namespace",
    "warning": "elsewhere: no security posture is declared for the object",
    "info": "on a node agent (a DaemonSet mounting the kubelet's, runtime, CNI, device-plugin "
    "or driver paths)",
}
THREAT_MODEL = "docs/security.md#host-access-by-posture"

TENANT = "a run or a team's workload: its pull request must not get host access (docs/security.md)"
ENFORCED = "policies/config.yaml enforces security here"
NODE_AGENT = "a node agent (DaemonSet mounting node paths): what such agents are for"
UNDECLARED = (
    "no security posture is declared here: `security: enforce` for this path or namespace "
    "in policies/config.yaml makes it an error"
)


@dataclass(frozen=True)
class Enforcement:
    """Where host access is an error although no team owns the object (the policy config's
    `security: enforce`): repository-relative path globs and namespace globs."""

    paths: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()

    def covers(self, relative: str | None, namespace: str | None) -> bool:
        if relative is not None and any(
            fnmatchcase(relative, p) or relative.startswith(p.rstrip("/") + "/") for p in self.paths
        ):
            return True
        return namespace is not None and any(fnmatchcase(namespace, n) for n in self.namespaces)


def tenant_workload(doc: Document, ctx: Context) -> bool:
    """A run, or an object in a namespace the cluster gives to a team."""
    if ctx.is_run:
        return True
    return ctx.find("ConfigMap", PARAMS, doc.namespace or "default") is not None


def node_agent(doc: Document) -> bool:
    """A DaemonSet whose pods mount a node agent's host paths."""
    if doc.kind != "DaemonSet":
        return False
    template = mapping(mapping(doc.obj.get("spec")).get("template"))
    for volume in dicts(mapping(template.get("spec")).get("volumes")):
        path = mapping(volume.get("hostPath")).get("path")
        if isinstance(path, str) and any(
            path == p or path.startswith(p + "/") for p in AGENT_PATHS
        ):
            return True
    return False


def grade(doc: Document, ctx: Context, enforcement: Enforcement) -> tuple[str, str]:
    """(severity, why) of host access on `doc` under the posture declared for it."""
    if tenant_workload(doc, ctx):
        return ERROR, TENANT
    if (enforcement.paths or enforcement.namespaces) and enforcement.covers(
        render_path(ctx), doc.namespace
    ):
        return ERROR, ENFORCED
    if node_agent(doc):
        return INFO, NODE_AGENT
    return WARNING, UNDECLARED


def milder(first: str, second: str) -> str:
    """The less severe of two severities."""
    return max(first, second, key=SEVERITIES.index)
