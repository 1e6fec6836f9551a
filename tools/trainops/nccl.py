"""What NCCL's environment variables are, which are gone, and which values they accept.

Shared by the policy pack (checking manifests) and the NCCL log doctor
(explaining what a run did). Sources: NCCL's environment documentation;
`domain-facts.md` records the subtle parts (the prefix matching of
NCCL_SOCKET_IFNAME and NCCL_IB_HCA, ignored unknown level strings).
"""

from __future__ import annotations

import re
from collections.abc import Callable

KNOWN = frozenset(
    """
    NCCL_ALGO NCCL_BUFFSIZE NCCL_CGA_CLUSTER_SIZE NCCL_CHECK_POINTERS NCCL_COLLNET_ENABLE
    NCCL_COLLNET_NODE_THRESHOLD NCCL_COMM_BLOCKING NCCL_COMM_ID NCCL_CONF_FILE
    NCCL_CREATE_THREAD_CONTEXT NCCL_CROSS_NIC NCCL_CUMEM_ENABLE NCCL_CUMEM_HOST_ENABLE
    NCCL_DEBUG NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS NCCL_DMABUF_ENABLE NCCL_ENV_PLUGIN
    NCCL_GDRCOPY_ENABLE NCCL_GRAPH_DUMP_FILE NCCL_GRAPH_FILE NCCL_GRAPH_MIXING_SUPPORT
    NCCL_GRAPH_REGISTER NCCL_HOSTID NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_ADDR_FAMILY
    NCCL_IB_ADDR_RANGE NCCL_IB_AR_THRESHOLD NCCL_IB_DISABLE NCCL_IB_ECE_ENABLE NCCL_IB_FIFO_TC
    NCCL_IB_GID_INDEX NCCL_IB_HCA NCCL_IB_MERGE_NICS NCCL_IB_MERGE_VFS
    NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_PKEY NCCL_IB_QPS_PER_CONNECTION NCCL_IB_RETRY_CNT
    NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_SPLIT_DATA_ON_QPS
    NCCL_IB_TC NCCL_IB_TIMEOUT NCCL_IB_USE_INLINE NCCL_IGNORE_CPU_AFFINITY NCCL_IGNORE_DISABLED_P2P
    NCCL_LAUNCH_MODE NCCL_LEGACY_CUDA_REGISTER NCCL_LOCAL_REGISTER NCCL_MAX_CTAS
    NCCL_MAX_P2P_NCHANNELS NCCL_MIN_CTAS NCCL_MIN_P2P_NCHANNELS NCCL_MNNVL_ENABLE
    NCCL_NCHANNELS_PER_NET_PEER NCCL_NET NCCL_NET_DISABLE_INTRA NCCL_NET_FORCE_FLUSH
    NCCL_NET_GDR_C2C NCCL_NET_GDR_LEVEL NCCL_NET_GDR_READ NCCL_NET_OVERHEAD NCCL_NET_PLUGIN
    NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS NCCL_NSOCKS_PERTHREAD NCCL_NTHREADS
    NCCL_NVB_DISABLE NCCL_NVLS_CHUNKSIZE NCCL_NVLS_ENABLE NCCL_NVLS_NCHANNELS NCCL_OOB_NET_ENABLE
    NCCL_OOB_NET_IFNAME NCCL_P2P_DIRECT_DISABLE NCCL_P2P_DISABLE NCCL_P2P_LEVEL
    NCCL_P2P_LL_THRESHOLD NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PXN_LEVEL
    NCCL_PROFILER_PLUGIN NCCL_PROTO NCCL_PROXY_APPEND_BATCH_SIZE NCCL_PXN_DISABLE NCCL_RAS_ADDR
    NCCL_RAS_ENABLE NCCL_RAS_TIMEOUT_FACTOR NCCL_RUNTIME_CONNECT NCCL_SET_STACK_SIZE
    NCCL_SET_THREAD_NAME NCCL_SHM_DISABLE NCCL_SHM_USE_CUDA_MEMCPY NCCL_SOCKET_FAMILY
    NCCL_SOCKET_IFNAME NCCL_SOCKET_NTHREADS NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC
    NCCL_TOPO_DUMP_FILE NCCL_TOPO_FILE NCCL_TUNER_PLUGIN NCCL_UID_STAGGER_RATE
    NCCL_UID_STAGGER_THRESHOLD NCCL_WORK_FIFO_BYTES NCCL_WORK_FIFO_DEPTH
    """.split()
)
DEPRECATED = {
    "NCCL_MIN_NCHANNELS": "NCCL_MIN_CTAS",
    "NCCL_MAX_NCHANNELS": "NCCL_MAX_CTAS",
    "NCCL_MIN_NRINGS": "NCCL_MIN_CTAS",
    "NCCL_MAX_NRINGS": "NCCL_MAX_CTAS",
}
REMOVED = {
    "NCCL_TREE_THRESHOLD": "NCCL picks the algorithm by message size itself; use NCCL_ALGO "
    "only to restrict the choice",
    "NCCL_LL_THRESHOLD": "NCCL tunes protocol thresholds itself; use NCCL_PROTO to restrict them",
    "NCCL_SINGLE_RING_THRESHOLD": "no replacement: NCCL tunes channels itself",
    "NCCL_IB_CUDA_SUPPORT": "use NCCL_NET_GDR_LEVEL",
    "NCCL_IB_GDR_LEVEL": "renamed NCCL_NET_GDR_LEVEL",
}
NOT_NCCL = {
    "NCCL_TIMEOUT": "NCCL has no collective timeout variable: pass "
    "timeout=datetime.timedelta(...) to torch.distributed.init_process_group",
    "NCCL_SOCKET_TIMEOUT": "NCCL has no such variable; socket retries are NCCL_SOCKET_RETRY_CNT "
    "and the collective timeout is init_process_group(timeout=...)",
    "NCCL_CONNECT_TIMEOUT": "NCCL has no such variable; the collective timeout is "
    "init_process_group(timeout=...)",
}
# PyTorch's names before 2.2 (pytorch#114077): still read as deprecated aliases.
TORCH_ALIASES = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
}

# Path types ncclGetLevel (src/graph/paths.cc) compares NCCL_P2P_LEVEL and
# NCCL_NET_GDR_LEVEL against, case-sensitively; older releases know fewer of them.
LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
SUBSYSTEMS = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "DESTROY",  # NCCL 2.30
    "ALLOC_HOST",  # NCCL 2.30
    "ALL",
)
ALGORITHMS = ("RING", "TREE", "COLLNETCHAIN", "COLLNETDIRECT", "NVLS", "NVLSTREE", "PAT")
PROTOCOLS = ("LL", "LL128", "SIMPLE")
_INT = re.compile(r"^-?\d+$")


def _level(value: str) -> str | None:
    """A path-type name, or a legacy integer: 0-3 LOC, PIX, PXB, PHB; 4 or more SYS."""
    if value in LEVELS or (_INT.match(value) and int(value) >= 0):
        return None
    if value.upper() in LEVELS:
        return f"{value!r}: NCCL compares level names case-sensitively and keeps its default"
    return (
        f"{value!r} is not a level ({', '.join(LEVELS)}, or an integer: 0-3 for LOC, PIX, PXB, "
        "PHB, 4 and above for SYS): NCCL keeps its default"
    )


def _int_range(low: int, high: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not _INT.match(value) or not low <= int(value) <= high:
            return f"{value!r} is outside {low}-{high}"
        return None

    return check


def _boolean(value: str) -> str | None:
    return None if value in ("0", "1") else f"{value!r} is not 0 or 1"


def _tokens(allowed: tuple[str, ...], what: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        tokens = [t.strip() for t in value.removeprefix("^").split(",")]
        unknown = [t for t in tokens if t.upper() not in allowed]
        if unknown:
            names = ", ".join(repr(t) for t in unknown)
            return f"unknown {what} {names} (known: {', '.join(allowed)})"
        return None

    return check


def _debug(value: str) -> str | None:
    if value.upper() in DEBUG_LEVELS:
        return None
    return f"{value!r} is not a debug level ({', '.join(DEBUG_LEVELS)})"


def _bytes(value: str) -> str | None:
    if not _INT.match(value) or int(value) <= 0:
        return f"{value!r} is not a size in bytes"
    size = int(value)
    if size & (size - 1):
        return f"{value} is not a power of two; NCCL buffers are sized in powers of two"
    return None


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "empty value"


VALUE_CHECKS: dict[str, Callable[[str], str | None]] = {
    "NCCL_NET_GDR_LEVEL": _level,
    "NCCL_P2P_LEVEL": _level,
    "NCCL_IB_TIMEOUT": _int_range(0, 31),
    "NCCL_IB_RETRY_CNT": _int_range(0, 7),
    "NCCL_IB_GID_INDEX": _int_range(-1, 255),
    "NCCL_IB_SL": _int_range(0, 15),
    "NCCL_IB_TC": _int_range(0, 255),
    "NCCL_IB_DISABLE": _boolean,
    "NCCL_P2P_DISABLE": _boolean,
    "NCCL_SHM_DISABLE": _boolean,
    "NCCL_NVLS_ENABLE": _boolean,
    "NCCL_DEBUG": _debug,
    "NCCL_DEBUG_SUBSYS": _tokens(SUBSYSTEMS, "subsystem"),
    "NCCL_ALGO": _tokens(ALGORITHMS, "algorithm"),
    "NCCL_PROTO": _tokens(PROTOCOLS, "protocol"),
    "NCCL_BUFFSIZE": _bytes,
    "NCCL_SOCKET_IFNAME": _non_empty,
    "NCCL_IB_HCA": _non_empty,
}


def check_value(name: str, value: str) -> str | None:
    """Why NCCL would not take `value` for `name`, or None when it would."""
    check = VALUE_CHECKS.get(name)
    return check(value) if check else None


def parse_selector(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL's device/interface list syntax: (exact, exclude, entries)."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    return exact, exclude, [e.strip() for e in rest.split(",") if e.strip()]


def selected_interfaces(value: str, interfaces: list[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME=value picks out of `interfaces`."""
    exact, exclude, entries = parse_selector(value)

    def hit(name: str) -> bool:
        return any(name == e if exact else name.startswith(e) for e in entries)

    if exclude:
        return [i for i in interfaces if not hit(i) and i != "lo"]
    return [i for i in interfaces if hit(i)]


def hca_overmatch(value: str) -> list[tuple[str, str]]:
    """Entries of a prefix-matched NCCL_IB_HCA that also select other devices.

    Returns (entry, what it also matches), e.g. ("mlx5_1", "mlx5_10..mlx5_19").
    """
    exact, exclude, entries = parse_selector(value)
    if exact or exclude:
        return []
    out = []
    for entry in entries:
        device = entry.split(":", 1)[0]
        index = re.search(r"_(\d+)$", device)
        if index is None:
            out.append((device, f"every device whose name starts with {device!r}"))
        elif index.group(1) != "0":  # mlx5_0 cannot prefix another name; mlx5_1 can
            out.append((device, f"{device}0..{device}9 and any longer name"))
    return out
