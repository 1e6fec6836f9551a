"""What PyTorch's distributed stack says: ProcessGroupNCCL's watchdog and errors, the c10d
TCP store and rendezvous, torchrun (elastic), Gloo, CUDA errors and exceptions.

`read(text)` returns (kind, fields) facts for one cleaned line. Multi-line messages are
read line by line: each line that carries a fact (an address, a rank, an error) is
recognised on its own.
"""

from __future__ import annotations

from trainops.doctor import events as ev
from trainops.doctor.limits import Pattern

_WATCHDOG = Pattern(
    r".*?(?:Watchdog caught collective operation timeout: )?WorkNCCL\((?:SeqNum=(\d+), )?"
    r"(?:[^)=]{0,40}, )?OpType=(\w+).*?Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds"
)
_NUMEL = Pattern(r".*?NumelIn=(\d+)")
_RANK_BEFORE = Pattern(r".*?\[(?:PG [^\]]{0,200}?)?Rank (\d+)\] (?:Watchdog|Exception|Timeout)")
_WORK = Pattern(
    r".*?(?:at work|at NCCL work): (\d+), last enqueued NCCL work: (-?\d+), "
    r"last completed NCCL work: (-?\d+)"
)
_STUCK = Pattern(r".*?Rank (\d+)\] ProcessGroupNCCL's watchdog got stuck for (\d+) seconds")
_NCCL_ERROR = Pattern(r".*?NCCL error in: \S+?, ([^(,]+?)(?: -[^,]*)?(?: \(run[^)]*\))?,")
_NCCL_ERROR_CODE = Pattern(r".*?NCCL Error (\d+): (.+)")
_VERSION = Pattern(r".*?NCCL version (\d+\.\d+\.\d+)")
_CATEGORY = Pattern(r"(nccl[A-Z]\w+Error|ncclInvalidUsage|ncclInProgress): ?(.*)")
_CLIENT_TIMEOUT = Pattern(
    r".*?client socket has timed out after \S+ while trying to connect to \(([^,]+), (\d+)\)"
)
_CLIENT_FAILED = Pattern(
    r".*?client socket has failed to connect to (?:any network address of )?"
    r"\[?([^\]\s]+?)\]?:(\d+) \(errno: \d+ - ([^)]+)\)"
)
_TCP_CLIENT = Pattern(r".*?TCP client failed to connect/validate to host (\S+):(\d+) - ([^(]+)")
_ANY_ADDRESS = Pattern(r".*?failed to connect to any network address of \(([^,]+), (\d+)\)")
_GAI = Pattern(r".*?addresses of \(([^,]+), (\d+)\) cannot be retrieved")
_BIND_PORT = Pattern(r".*?(?:port: |bind to \S+?:|bind to \[[^\]]*\]:)(\d+)")
_JOIN = Pattern(r".*?Timed out after (\d+) seconds waiting for (?:clients|workers)\. (\d+)/(\d+)")
_GLOO_REMOTE = Pattern(r".*?remote=\[([^\]]+)\](?::(\S+))?")
_GLOO_LOCAL = Pattern(r".*?local=\[([^\]]+)\]")
_GLOO_PAIR = Pattern(r".*?pair\.cc:\d+\] connect \[([^\]]+)\]:(\d+): (.+)")
_GLOO_IFACE = Pattern(r".*?Unable to find address for: (\S+)")
# `CUDA error: <string>` (c10's C10_CUDA_CHECK) and, before torch 1.5, THC's
# `cuda runtime error (%d) : %s at %s:%d` and the line __THCudaCheck printed before it,
# `THCudaCheck FAIL file=%s line=%i error=%i : %s` (THCGeneral.cpp): the string ends at a
# full stop or at THC's " at <file>:<line>".
_CUDA_ERROR = Pattern(
    r".*?(?:CUDA error|cuda runtime error \(\d+\)|THCudaCheck FAIL file=\S+ line=\d+ "
    r"error=\d+) ?: ([^.\n]+?)(?: at \S+:\d+)?(?:[.\n]|$)"
)
_CUDA_DRIVER_API = Pattern(r".*?(CUDA_ERROR_\w+)")
_MISMATCH_RANKS = Pattern(r"Rank (\d+) is running (?:inconsistent )?collective")
_OPS = Pattern(r"OpType=(\w+)")
_SHAPES = Pattern(r"TensorShape=\[([^\]]*)\]")
_DIFFER = Pattern(r".*?differ in the following aspects: *(.+)")
# ChildFailedError's table (`exitcode  : -7 (pid: ...)`, torch/distributed/elastic/
# multiprocessing/errors/__init__.py) and the elastic agent's log line
# (`failed (exitcode: -9) local_rank: 1 (pid: ...) of binary: ...`, .../multiprocessing/api.py):
# a negative exit code is the signal that ended the worker.
_EXITCODE = Pattern(r"(?:\s*|.*?failed \()exitcode\s*: (-?\d+)")
# DeepSpeed's launcher (deepspeed/launcher/launch.py, sigkill_handler) on the first rank that
# ended badly: `[cmd] exits with return code = -7`, Popen's returncode (negative: the signal).
_RETURN_CODE = Pattern(r".*?\bexits with return code = (-?\d+)")
# A shell reports a foreground command ended by SIGKILL with the signal's name, alone or on
# its job line (bash's `bash: line 1:  4711 Killed  python train.py`); 137 is 128 + 9, the
# exit status shells, containers and kubectl describe give it.
_SHELL_KILLED = Pattern(r"(?:Killed|(?:\S+: line \d+: +)?\d+ +Killed +\S.*)$")
_STATUS_137 = Pattern(r".*?\bexit(?:ed with)?(?: code| status)[:= ]+137\b")
_SIGNAL = Pattern(r".*?Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_EXCEPTION = Pattern(r"(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception))(?:: ?(.*))?$")

_UNRESOLVED = (
    "Name or service not known",
    "Temporary failure in name resolution",
    "nodename nor servname provided",
)
_BIND = (
    "failed to listen on any local network address",
    "Address already in use",
    "address already in use",
    "EADDRINUSE",
)


# DataLoader workers pass batches through /dev/shm; when it is full they die of SIGBUS.
_SHARED_MEMORY = (
    "insufficient shared memory (shm)",
    "is killed by signal: Bus error",
)


# A process that died of SIGBUS, as the C library names the signal (strsignal: "Bus error",
# which shells print as "Bus error (core dumped)", Python's faulthandler as "Fatal Python
# error: Bus error", UCX's handler as "Caught signal 7 (Bus error: ...)").
_BUS_ERROR = ("Bus error", "SIGBUS")


def read(text: str) -> list[tuple[str, dict]]:
    if any(marker in text for marker in _SHARED_MEMORY):
        return [(ev.SHM_FAILURE, {"message": text, "no_space": False, "dataloader": True})]
    if any(marker in text for marker in _BUS_ERROR):
        return [(ev.SHM_FAILURE, {"message": text, "no_space": False, "sigbus": True})]
    return _watchdog(text) or _store(text) or _gloo(text) or _errors(text)


def _watchdog(text: str) -> list[tuple[str, dict]]:
    # A paste may keep only the work and its timing, without the watchdog's first clause.
    if "Watchdog caught collective operation timeout" in text or (
        "WorkNCCL(" in text and " ran for " in text
    ):
        m = _WATCHDOG.match(text)
        if m is None:
            return []
        rank = _RANK_BEFORE.match(text)
        fields = {
            "rank": int(rank.group(1)) if rank else None,
            "seq": int(m.group(1)) if m.group(1) else None,
            "op": m.group(2),
            "timeout_ms": int(m.group(3)),
            "ran_ms": int(m.group(4)),
            "numel": int(n.group(1)) if (n := _NUMEL.match(text)) else None,
        }
        return [(ev.WATCHDOG, fields)]
    if "last enqueued NCCL work" in text and (m := _WORK.match(text)):
        rank = _RANK_BEFORE.match(text)
        fields = {
            "rank": int(rank.group(1)) if rank else None,
            "at": int(m.group(1)),
            "enqueued": int(m.group(2)),
            "completed": int(m.group(3)),
        }
        return [(ev.WATCHDOG_WORK, fields)]
    if "watchdog got stuck" in text and (m := _STUCK.match(text)):
        return [(ev.HEARTBEAT, {"rank": int(m.group(1)), "seconds": int(m.group(2))})]
    return []


def _store(text: str) -> list[tuple[str, dict]]:
    if "client socket" in text or "TCP client failed" in text or "network address of" in text:
        for pattern in (_CLIENT_TIMEOUT, _TCP_CLIENT, _CLIENT_FAILED, _ANY_ADDRESS):
            if m := pattern.match(text):
                reason = m.group(3).strip() if m.re.groups >= 3 else "timed out"
                return [
                    (ev.STORE_CONNECT, {"host": m.group(1), "port": m.group(2), "reason": reason})
                ]
    if "connect() timed out" in text or "connection to the C10d store has failed" in text:
        return [(ev.STORE_CONNECT, {"host": None, "port": None, "reason": "timed out"})]
    if any(marker in text for marker in _UNRESOLVED):
        m = _GAI.match(text)
        return [(ev.UNRESOLVED, {"host": m.group(1) if m else None})]
    if any(marker in text for marker in _BIND) and "NCCL" not in text:
        m = _BIND_PORT.match(text)
        return [(ev.BIND, {"port": m.group(1) if m else None})]
    if "waiting for clients" in text or "waiting for workers" in text:
        m = _JOIN.match(text)
        if m:
            fields = {"seconds": int(m.group(1)), "joined": int(m.group(2))}
            return [(ev.STORE_JOIN, {**fields, "expected": int(m.group(3))})]
    for error in ("RendezvousTimeoutError", "RendezvousClosedError"):
        if error in text:
            return [(ev.RENDEZVOUS, {"error": error})]
    return []


def _gloo(text: str) -> list[tuple[str, dict]]:
    if "Using the loopback address as fallback" in text:
        return [(ev.GLOO_LOOPBACK, {})]
    if "Unable to find address for:" in text and (m := _GLOO_IFACE.match(text)):
        # gloo/transport/tcp/device.cc prints this from two places: lookupAddrForIface
        # (GLOO_SOCKET_IFNAME set; enforces `ifa != nullptr`) and lookupAddrForHostname (no
        # interface set: the host's own name; enforces `rp != nullptr` after trying to bind
        # each address the name resolves to).
        hostname = "rp != nullptr" in text
        return [(ev.GLOO_NO_INTERFACE, {"name": m.group(1), "hostname": hostname})]
    if "remote=[" in text and (m := _GLOO_REMOTE.match(text)):
        local = _GLOO_LOCAL.match(text)
        fields = {"remote": m.group(1), "local": local.group(1) if local else None}
        return [(ev.GLOO_CONNECT, {**fields, "reason": _reason(text)})]
    if "pair.cc" in text and "] connect [" in text and (m := _GLOO_PAIR.match(text)):
        return [(ev.GLOO_CONNECT, {"remote": m.group(1), "local": None, "reason": m.group(3)})]
    if "connectFullMesh failed" in text:
        return [(ev.GLOO_CONNECT, {"remote": None, "local": None, "reason": _reason(text)})]
    return []


def _reason(text: str) -> str:
    for reason in ("Connection refused", "timed out", "Connection reset", "No route to host"):
        if reason in text:
            return reason
    return "failed"


# torchrun's elastic agent on a signal it got itself (it handles SIGTERM, SIGINT, SIGHUP and
# SIGQUIT: TORCHELASTIC_SIGNALS_TO_HANDLE, torch v2.13.0 .../multiprocessing/api.py#L538-L546):
# SignalException's `Process 7 got signal: 1` (api.py#L86), the agent's `Received 1 death
# signal, shutting down workers` (agent/server/api.py#L753), and the signal it passes on,
# `Sending process 8 closing signal SIGHUP` (api.py#L1029; SIGTERM there is the usual
# teardown after a worker failed, not a signal the agent got).
_AGENT_SIGNAL = Pattern(r".*?(?:Received (\w+) death signal|Process \d+ got signal: (\w+))")
_PASSED_ON = Pattern(r".*?Sending process \d+ closing signal (SIG(?:HUP|INT|QUIT))\b")
_SIGNAL_NAMES = {"1": "SIGHUP", "2": "SIGINT", "3": "SIGQUIT", "15": "SIGTERM"}


def _agent_signal(text: str) -> list[tuple[str, dict]]:
    signalled = "death signal" in text or "got signal" in text
    if signalled and (m := _AGENT_SIGNAL.match(text)):
        raw = (m.group(1) or m.group(2)).removeprefix("Signals.")
        name = _SIGNAL_NAMES.get(raw, raw if raw.startswith("SIG") else f"signal {raw}")
        return [(ev.AGENT_SIGNAL, {"signal": name})]
    if "closing signal" in text and (m := _PASSED_ON.match(text)):
        return [(ev.AGENT_SIGNAL, {"signal": m.group(1)})]
    return []


def _errors(text: str) -> list[tuple[str, dict]]:
    found: list[tuple[str, dict]] = _agent_signal(text)
    if found:
        return found
    if "NCCL error" in text or "NCCL Error" in text:
        m = _NCCL_ERROR.match(text)
        code = _NCCL_ERROR_CODE.match(text) if m is None else None
        category = m.group(1).strip() if m else (code.group(2).strip() if code else "error")
        version = _VERSION.match(text)
        found.append(
            (ev.TORCH_NCCL_ERROR, {"category": category, "version": version and version.group(1)})
        )
    elif m := _CATEGORY.match(text):
        found.append((ev.TORCH_NCCL_ERROR, {"category": m.group(1), "version": None}))
    if "mismatch between collectives" in text:
        found.append((ev.MISMATCH, _mismatch(text)))
    if "CUDA error" in text or "cuda runtime error" in text or "THCudaCheck FAIL" in text:
        if m := _CUDA_ERROR.match(text):
            found.append((ev.CUDA_ERROR, {"error": m.group(1).strip()}))
    elif "CUDA_ERROR_" in text and (m := _CUDA_DRIVER_API.match(text)):
        found.append((ev.CUDA_ERROR, {"error": m.group(1)}))
    if "exitcode" in text and (m := _EXITCODE.match(text)) and m.group(1) != "0":
        found.append((ev.CHILD_FAILED, {"exitcode": int(m.group(1)), "signal": None}))
    if "return code" in text and (m := _RETURN_CODE.match(text)) and m.group(1) != "0":
        found.append((ev.CHILD_FAILED, {"exitcode": int(m.group(1)), "signal": None}))
    if "Killed" in text and _SHELL_KILLED.match(text.strip()):
        found.append((ev.CHILD_FAILED, {"exitcode": None, "signal": "SIGKILL"}))
    elif "137" in text and _STATUS_137.match(text.lower()):
        found.append((ev.CHILD_FAILED, {"exitcode": -9, "signal": None}))
    if "received by PID" in text and (m := _SIGNAL.match(text)):
        found.append((ev.CHILD_FAILED, {"exitcode": None, "signal": m.group(2)}))
    if not found and ("Error" in text or "Exception" in text) and (m := _EXCEPTION.match(text)):
        found.append((ev.EXCEPTION, {"name": m.group(1), "message": (m.group(2) or "").strip()}))
    return found


def _mismatch(text: str) -> dict:
    ranks = sorted({int(r) for r in _MISMATCH_RANKS.findall(text)})
    ops = _OPS.findall(text)
    shapes = _SHAPES.findall(text)
    differ = _DIFFER.match(text)
    detail = differ.group(1).strip() if differ else ""
    if not detail and len(set(ops)) > 1:
        detail = "operations " + " vs ".join(ops)
    elif not detail and len(set(shapes)) > 1:
        detail = "tensor shapes " + " vs ".join(f"[{s}]" for s in shapes)
    return {"ranks": ranks, "ops": ops, "detail": detail}
