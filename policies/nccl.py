"""NCCL's environment: real names, accepted values, and interfaces the pod really has."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from trainops import multus, nccl
from trainops.model import ERROR, INFO, WARNING
from trainops.policy import Context, Violation, needs, pod_rule
from trainops.policy.pods import PodTemplate, env_index, env_of

from . import common


def _nccl_env(pod: PodTemplate) -> list[tuple[int, dict, str, str | None, tuple]]:
    """(container index, container, name, literal value, path) of every NCCL_* variable."""
    if "env" not in pod.container_fields:
        return []
    return pod.memo("nccl-env", lambda: list(_find_nccl_env(pod)))


def _find_nccl_env(pod: PodTemplate) -> Iterator[tuple[int, dict, str, str | None, tuple]]:
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        if not any(name.startswith("NCCL_") for name in env):
            continue
        for name, value in env.items():
            if name.startswith("NCCL_"):
                at = (*pod.container_path(index), "env", env_index(container, name))
                yield index, container, name, value, at


@needs("env", multus.ANNOTATION, kinds=(*common.MPI_ROLES, "TrainJob"))
def _may_pick_interface(pod: PodTemplate) -> bool:
    """The pod sets NCCL_SOCKET_IFNAME, attaches networks, or is an MPI launcher (whose
    ranks' networks decide)."""
    return (
        "NCCL_SOCKET_IFNAME" in common.env_names(pod)
        or common.attaches_networks(pod)
        or common.is_mpi_launcher(pod)
    )


@needs("env")
def sets_nccl_env(pod: PodTemplate) -> bool:
    """Pods with NCCL_* variables (the `applies` predicate of the variable rules)."""
    return bool(_nccl_env(pod))


KNOWN_NAMES = (
    nccl.KNOWN
    | set(nccl.DEPRECATED)
    | set(nccl.REMOVED)
    | set(nccl.NOT_NCCL)
    | set(nccl.TORCH_ALIASES)
)


@pod_rule(
    id="nccl-not-a-variable",
    severity=WARNING,
    title="No made-up NCCL_* variables",
    why="Blog posts spread variables that neither NCCL nor PyTorch reads (NCCL_TIMEOUT, "
    "NCCL_SOCKET_TIMEOUT, NCCL_CONNECT_TIMEOUT). Setting them changes nothing while everyone "
    "believes the timeout was configured.",
    fix="Use what actually exists: init_process_group(timeout=...) for the collective timeout, "
    "NCCL_SOCKET_RETRY_CNT for socket retries.",
    applies=sets_nccl_env,
)
def not_a_variable(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, _, name, _, at in _nccl_env(pod):
        if name in nccl.NOT_NCCL:
            yield Violation(f"{name} is not an NCCL variable", at, fix=nccl.NOT_NCCL[name] + ".")


@pod_rule(
    id="nccl-unknown-variable",
    severity=WARNING,
    title="NCCL_* variables are ones NCCL knows",
    why="NCCL ignores variables it does not know, so a misspelling (NCCL_SOCKET_IFNAMES) "
    "silently leaves the default in place.",
    fix="Correct the name; if it is newer than trainops' list, exempt it with a reason.",
    applies=sets_nccl_env,
)
def unknown_variable(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, _, name, _, at in _nccl_env(pod):
        if name in KNOWN_NAMES:
            continue
        close = difflib.get_close_matches(name, sorted(nccl.KNOWN), n=1, cutoff=0.85)
        if close:
            yield Violation(
                f"{name} is not an NCCL variable; did you mean {close[0]}?",
                at,
                fix=f"Rename it to {close[0]}.",
            )
        else:
            yield Violation(f"{name} is not a variable NCCL documents", at)


@pod_rule(
    id="nccl-deprecated-variable",
    severity=WARNING,
    title="No deprecated NCCL variables",
    why="Deprecated variables still work today and stop working in a later release, usually "
    "unnoticed: NCCL's own (NCCL_MIN_NCHANNELS...) and PyTorch's pre-2.2 names "
    "(NCCL_ASYNC_ERROR_HANDLING, NCCL_BLOCKING_WAIT), which PyTorch still reads as aliases "
    "of TORCH_NCCL_* with a deprecation warning.",
    fix="Use the replacement named in the finding.",
    applies=sets_nccl_env,
)
def deprecated_variable(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, _, name, _, at in _nccl_env(pod):
        if name in nccl.DEPRECATED:
            yield Violation(
                f"{name} is deprecated; use {nccl.DEPRECATED[name]}",
                at,
                fix=f"Replace it with {nccl.DEPRECATED[name]}.",
            )
        elif name in nccl.TORCH_ALIASES:
            new = nccl.TORCH_ALIASES[name]
            yield Violation(
                f"{name} is PyTorch's deprecated alias of {new} (still read, with a warning)",
                at,
                fix=f"Rename it to {new}.",
            )


@pod_rule(
    id="nccl-removed-variable",
    severity=WARNING,
    title="No NCCL variables that NCCL removed",
    why="Removed variables are ignored: the tuning they promise does not happen.",
    fix="Remove the variable; the finding names what replaced it, if anything.",
    applies=sets_nccl_env,
)
def removed_variable(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, _, name, _, at in _nccl_env(pod):
        if name in nccl.REMOVED:
            yield Violation(f"{name} was removed from NCCL ({nccl.REMOVED[name]})", at)


@pod_rule(
    id="nccl-invalid-value",
    severity=WARNING,
    title="NCCL variables have values NCCL accepts",
    why="NCCL silently keeps its default for a level it does not recognise (level names are "
    "case-sensitive: NCCL_P2P_LEVEL=nvl is ignored) and clamps or rejects out-of-range "
    "numbers, so the job runs with settings nobody chose.",
    fix="Use a documented value: levels LOC, NVL, PIX, PXB, PHB, SYS... in capitals (or the "
    "legacy integers, 4 and above meaning SYS), NCCL_IB_TIMEOUT 0-31, NCCL_IB_RETRY_CNT 0-7, "
    "NCCL_DEBUG VERSION|WARN|INFO|TRACE, NCCL_PROTO LL, LL128, Simple.",
    applies=sets_nccl_env,
)
def invalid_value(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, _, name, value, at in _nccl_env(pod):
        if value is None:
            continue
        problem = nccl.check_value(name, value)
        if problem:
            yield Violation(f"{name}: {problem}", (*at, "value"))


@pod_rule(
    id="nccl-ib-hca-prefix",
    severity=WARNING,
    title="NCCL_IB_HCA selects exactly the intended devices",
    why="NCCL_IB_HCA entries are prefixes: mlx5_1 also selects mlx5_10 to mlx5_19, and mlx5 "
    "selects every Mellanox device, management NICs included.",
    fix="Prefix the list with = for exact names (NCCL_IB_HCA==mlx5_0,mlx5_1), or list ports "
    "(mlx5_1:1).",
    applies=sets_nccl_env,
)
def ib_hca_prefix(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, _, name, value, at in _nccl_env(pod):
        if name == "NCCL_IB_HCA" and value:
            for entry, also in nccl.hca_overmatch(value):
                yield Violation(f"NCCL_IB_HCA entry {entry!r} also selects {also}", (*at, "value"))


@pod_rule(
    id="nccl-socket-ifname",
    severity=ERROR,
    source="https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/bootstrap.cc#L113-L117",
    when={
        "error": "NCCL_SOCKET_IFNAME matches none of the pod's interfaces (bootstrap fails)",
        "warning": "it selects only eth0 while a training network is attached, or it is "
        "unset on a pod that attaches one",
    },
    title="NCCL_SOCKET_IFNAME names an interface the pod has",
    why="The pod gets lo, eth0 and one netN per Multus attachment. If NCCL_SOCKET_IFNAME "
    "matches none of them NCCL cannot bootstrap; if it matches only eth0 while a training "
    "fabric is attached, NCCL's traffic goes over the pod network.",
    fix="Point it at the training interface exactly (NCCL_SOCKET_IFNAME==net1), and keep it in "
    "step with the k8s.v1.cni.cncf.io/networks annotation.",
    applies=_may_pick_interface,
)
def socket_ifname(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    ranks = common.rank_pod(pod, ctx)
    available = multus.interfaces(ranks.annotations, pod.doc.namespace or "default")
    secondary = [i for i in available if i not in ("lo", "eth0")]
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        value = env.get("NCCL_SOCKET_IFNAME")
        at = (*pod.container_path(index), "env", env_index(container, "NCCL_SOCKET_IFNAME"))
        if value is None:
            ranks_env = common.rank_env(pod, container, ctx)
            if secondary and ranks.uses_gpus and "NCCL_SOCKET_IFNAME" not in ranks_env:
                yield Violation(
                    f"the pod attaches {', '.join(secondary)} but NCCL_SOCKET_IFNAME is unset: "
                    "NCCL may bootstrap over eth0",
                    pod.container_path(index),
                    severity=WARNING,
                )
            continue
        chosen = nccl.selected_interfaces(value, available)
        if not chosen:
            yield Violation(
                f"NCCL_SOCKET_IFNAME={value} matches none of the pod's interfaces "
                f"({', '.join(available)})",
                (*at, "value"),
            )
        elif secondary and not set(chosen) & set(secondary):
            yield Violation(
                f"NCCL_SOCKET_IFNAME={value} selects {', '.join(chosen)}, not the attached "
                f"training network ({', '.join(secondary)})",
                (*at, "value"),
                severity=WARNING,
            )


@pod_rule(
    id="nccl-ib-disabled-with-rdma",
    severity=WARNING,
    title="IB transport stays on for pods that request RDMA devices",
    why="NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets: the RDMA devices the pod reserved sit "
    "idle and all-reduce runs at a fraction of the fabric's speed.",
    fix="Set NCCL_IB_DISABLE=0 (or remove it) on RDMA pods; drop the RDMA resource otherwise.",
    applies=common.requests_rdma,
)
def ib_disabled_with_rdma(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        if env_of(container).get("NCCL_IB_DISABLE") == "1" and common.rdma_resources(container):
            at = (*pod.container_path(index), "env", env_index(container, "NCCL_IB_DISABLE"))
            devices = ", ".join(common.rdma_resources(container))
            yield Violation(f"NCCL_IB_DISABLE=1 while the container requests {devices}", at)


@pod_rule(
    id="nccl-debug-info",
    severity=INFO,
    when={"info": "NCCL_DEBUG=INFO", "warning": "NCCL_DEBUG=TRACE"},
    title="NCCL debug output is intentional",
    why="NCCL_DEBUG=INFO is the transport evidence the preflight and `trainops doctor` read; "
    "without NCCL_DEBUG_SUBSYS it logs every collective setup, and TRACE slows training.",
    fix="Keep INFO with NCCL_DEBUG_SUBSYS=INIT,NET, or drop to WARN once the fabric is proven.",
    applies=sets_nccl_env,
)
def debug_info(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, container, name, value, at in _nccl_env(pod):
        if name != "NCCL_DEBUG" or value is None:
            continue
        if value.upper() == "TRACE":
            yield Violation("NCCL_DEBUG=TRACE slows every collective", at, severity=WARNING)
        elif value.upper() == "INFO" and "NCCL_DEBUG_SUBSYS" not in env_of(container):
            yield Violation(
                "NCCL_DEBUG=INFO without NCCL_DEBUG_SUBSYS logs every collective setup", at
            )
        elif value.upper() == "INFO":
            yield Violation("NCCL_DEBUG=INFO is on (transport evidence in the logs)", at)


@pod_rule(
    id="nccl-transport-evidence",
    severity=WARNING,
    title="Multi-node GPU jobs log which NCCL transport they use",
    why="A job that silently falls back to TCP sockets still runs, just several times slower. "
    "Only NCCL's INFO output (NET/IB, NET/Socket, /GDRDMA) shows which path it took.",
    fix="Set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET, and check the logs (trainops "
    "doctor nccl) or let the trainer check the transport (TRAINER_EXPECT_TRANSPORT).",
    applies=common.gpu_pod,
)
def transport_evidence(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if not common.multi_node(pod, ctx):
        return
    for index, container in enumerate(pod.containers):
        env = common.rank_env(pod, container, ctx)
        level = (env.get("NCCL_DEBUG") or "").upper()
        if level not in ("INFO", "TRACE") and not env.get("TRAINER_EXPECT_TRANSPORT"):
            yield Violation(
                "no NCCL_DEBUG=INFO: the logs will not show which transport NCCL picked",
                pod.container_path(index),
            )
