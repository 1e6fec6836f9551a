"""The facts the doctor reads from log lines: one `Event` per fact, with where it came from.

Parsers (`nccl_messages`, `torch_messages`, `node_messages`) turn a line into zero or more
(kind, fields) pairs; `parse` attaches the source, line number, process, rank and
attempt. Findings look events up by kind, so a rule never re-reads text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# NCCL: what it set up
COMM = "comm"  # rank, nranks, comm, phase (START|COMPLETE)
INIT_TIME = "init-time"  # seconds
NETWORK = "network"  # name (IB, Socket, IBext_v8, AWS Libfabric ...)
IB_DEVICES = "ib-devices"  # devices [(name, port, layer)], oob
SOCKET_IFS = "socket-interfaces"  # interfaces [(name, address)]
BOOTSTRAP_IFS = "bootstrap-interfaces"  # interfaces [(name, address)]
IB_MISSING = "ib-missing"
CHANNEL = "channel"  # via (NET/IB/0/GDRDMA, P2P/IPC, SHM ...)
ENV = "env"  # name, value
VERSION = "version"  # version
DRIVER = "cuda-driver"  # version (per-process once: a repeat means a restart)
PLUGIN = "net-plugin"  # plugin (path or "internal")
PLUGIN_BROKEN = "net-plugin-broken"  # error (dlopen's, for a plugin that exists)
OFI_PROVIDER = "ofi-provider"  # provider (the libfabric provider aws-ofi-nccl selected)
GDR_DISABLED = "gdr-disabled"  # hca
ERROR_TRAIL = "error-trail"  # code (NCCL result), location

# NCCL: what went wrong
NCCL_WARN = "nccl-warn"  # message, location
SHM_FAILURE = "shm-failure"  # message, no_space
IB_COMPLETION = "ib-completion"  # status, peer, vendor
IBV_CALL = "ibv-call"  # call, reason, errno, device
IB_OPEN = "ib-open-failed"  # device
IB_ASYNC = "ib-async"  # event, device
OFI = "ofi-failure"  # message, memory
SOCKET_CONNECT = "socket-connect"  # address, reason, retrying
NO_INTERFACE = "no-interface"  # message
BAD_ADDRESS_FAMILY = "bad-address-family"
DUPLICATE_GPU = "duplicate-gpu"  # ranks, device
CUDA_FAILURE = "cuda-failure"  # error, code, location
MISMATCH = "collective-mismatch"  # ranks, ops, detail
TOPOLOGY = "topology-error"  # message, kind (xml|search)
TESTS_FAILURE = "nccl-tests-failure"  # message

# PyTorch
WATCHDOG = "watchdog-timeout"  # rank, seq, op, timeout_ms, ran_ms
WATCHDOG_WORK = "watchdog-work"  # rank, at, enqueued, completed
HEARTBEAT = "watchdog-stuck"  # rank, seconds
TORCH_NCCL_ERROR = "torch-nccl-error"  # category, version
STORE_CONNECT = "store-connect"  # host, port, reason
UNRESOLVED = "host-unresolved"  # host
BIND = "bind-failed"  # port
STORE_JOIN = "store-join-timeout"  # joined, expected, seconds
RENDEZVOUS = "rendezvous-error"  # error
GLOO_CONNECT = "gloo-connect"  # remote, local, reason
GLOO_NO_INTERFACE = "gloo-no-interface"  # name
GLOO_LOOPBACK = "gloo-loopback-fallback"
CUDA_ERROR = "cuda-error"  # error (from a PyTorch/CUDA exception)
CHILD_FAILED = "child-failed"  # exitcode, signal
AGENT_SIGNAL = "agent-signal"  # signal (name): torchrun itself got a termination signal
EXCEPTION = "exception"  # name, message (an exception no other parser explains)

# trainer-launch (the trainer image's launcher)
HANG_REPORT = "hang-report"  # attempt, first (rank whose watchdog fired first), step
HANG_CULPRIT = "hang-culprit"  # culprits [ranks], detail (the report's verdict)
LAUNCHER_EXIT = "launcher-exit"  # decider (rank or None), cause, evidence, code, meaning

# Flight Recorder
FR_STATE = "flight-recorder"  # rank, pg, completed, pending_seq, pending_op, pending_state, ops

# Node
XID = "xid"  # code, pci, detail
OFF_BUS = "gpu-off-bus"  # pci
GPU_INIT = "gpu-init-failed"  # detail
CMA_DENIED = "cma-denied"  # errno (Open MPI's single-copy read between processes refused)

# What shows the job worked (`outcome_messages`)
FINISHED = (
    "finished"  # torchrun's group succeeded, NCCL destroyed a communicator, nccl-tests summary
)
PROGRESS = "progress"  # step (a training step with a loss)
LOOP_ENDED = "loop-ended"  # the framework's training loop ended (Lightning, HF Trainer)
TESTS_STARTED = "nccl-tests-started"  # nccl-tests printed its banner or rank list

# The message catalog (`catalog`): a line printed from a catalogued message
CATALOGUED = "catalogued"  # entry
ERRNO = "errno"  # entry (the C library's error text inside a line, `catalog/errno.yaml`)

# Lines no parser and no catalog entry knows
ERROR_LINE = "error-line"  # message (a line that reports an error: a traceback, `...Error:`)
MENTION = "mention"  # (a line of NCCL, PyTorch, CUDA or launcher output)

# Restart boundaries
RESTART = "restart"

FAILURE_KINDS = frozenset(
    {
        NCCL_WARN,
        SHM_FAILURE,
        IB_COMPLETION,
        IBV_CALL,
        IB_OPEN,
        IB_ASYNC,
        OFI,
        SOCKET_CONNECT,
        NO_INTERFACE,
        BAD_ADDRESS_FAMILY,
        DUPLICATE_GPU,
        CUDA_FAILURE,
        MISMATCH,
        TOPOLOGY,
        TESTS_FAILURE,
        WATCHDOG,
        HEARTBEAT,
        TORCH_NCCL_ERROR,
        STORE_CONNECT,
        UNRESOLVED,
        BIND,
        STORE_JOIN,
        RENDEZVOUS,
        GLOO_CONNECT,
        GLOO_NO_INTERFACE,
        CUDA_ERROR,
        CHILD_FAILED,
        AGENT_SIGNAL,
        EXCEPTION,
        HANG_CULPRIT,
        LAUNCHER_EXIT,
        XID,
        OFF_BUS,
        GPU_INIT,
        ERROR_TRAIL,
    }
)


@dataclass(frozen=True)
class ProcessKey:
    """NCCL's host and pid, or the rank PyTorch named when NCCL did not."""

    host: str | None
    pid: str | None
    rank: int | None = None

    @property
    def label(self) -> str:
        if self.host is not None:
            return f"{self.host}:{self.pid}" if self.pid else self.host
        return f"rank {self.rank}" if self.rank is not None else "?"


@dataclass
class Event:
    kind: str
    source: str
    line: int
    text: str  # the cleaned line, shortened
    attempt: int
    process: ProcessKey | None
    rank: int | None
    fields: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    def evidence(self) -> str:
        return f"{self.where}: {self.text}"
