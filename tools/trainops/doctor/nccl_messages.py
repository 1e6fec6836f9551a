"""What NCCL's own messages say, from 2.2 to the current 2.2x releases.

`read(message, header)` gets the text after NCCL's level keyword (or a whole line when a
paste dropped the header, or the line after PyTorch's "Last error:") and returns
(kind, fields) facts. Messages are recognised by their fixed wording; patterns run only on
bounded windows (see `limits`).
"""

from __future__ import annotations

from trainops.doctor import events as ev
from trainops.doctor.limits import Pattern
from trainops.doctor.lines import NcclHeader

_COMM = Pattern(r".*?comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+)")
_TIMINGS = Pattern(r".*?Init timings.*? total ([\d.]+)")
_DEVICE = Pattern(r"\[(\d+)\]([^:\s\[\]]+)(?::(\d+))?(?:/([A-Za-z]+))?")
_INTERFACE = Pattern(r"(?:\[\d+\])?([^:\s]+):(\S+?)<\d+>")
_CHANNEL = Pattern(r"(?:Channel|Ring) \d+(?:/\d+)? : .*? via (\S+)")
_ENV = Pattern(r"([A-Z][A-Z0-9_]{2,}) set (?:by environment )?to (.*?)\.?\s*$")
_VERSION = Pattern(r"NCCL version (\d+\.\d+\.\d+\S*)")
_DRIVER = Pattern(r"cudaDriverVersion (\d+)")
_GDR_HCA = Pattern(r"GPU Direct RDMA Disabled for HCA \d+ '([^']+)'")
_TRAIL = Pattern(r"(\S+:\d+) -> (\d+)")
_COMPLETION = Pattern(
    r".*?Got completion (?:from peer (\S+) )?with (?:status=|error )(\d+)"
    r"(?:.*?vendor err (\d+))?"
)
_IBV = Pattern(
    r".*?Call to (ibv_\w+) failed(?: with (?:error )?(?:(\d+) )?([A-Za-z][^,]*))?"
    r"(?:, on dev (\S+?)[:,])?"
)
_OPEN = Pattern(r".*?Unable to open device (\S+)")
_ASYNC = Pattern(r".*?(?:(\S+) )?Got async event : (.+)")
_CONNECT = Pattern(r".*?Connect to (\S+) failed : (.+)")
_CONNECT_OLD = Pattern(r".*?Call to connect (?:failed|timeout|returned) :? ?(.+?)(, retrying)?$")
_DUPLICATE = Pattern(
    r".*?Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\S+)"
)
_CUDA = Pattern(r".*?(?:Cuda|CUDA) failure(?: (\d+))?(?: (\S+:\d+))? '([^']*)'?")
_TEST_FAILURE = Pattern(r".*?NCCL failure (\S+:\d+) '?([^']*)")
_IPC = Pattern(r".*?failed to open CUDA IPC handle : (\d+) (.+)")
_TRUNCATED = Pattern(r".*?(?:Message truncated|receiving|received) (\d+) bytes instead of (\d+)")
_PEER = Pattern(r"([^<\s]+)<\d+>")

_TOPOLOGY = (
    ("Attribute ", "xml"),
    ("too many XML nodes", "xml"),
    ("Failed to find reverse path", "search"),
    ("Could not find NET with id", "search"),
)
# Warnings NCCL prints on healthy systems: no verbs library without IB, sysfs paths that
# virtual interfaces lack.
_BENIGN = ("Failed to open libibverbs", "Could not find real path")
# NCCL found no IP interface it can use: none matched, or none of a usable address family
# (a container without networking).
_NO_INTERFACE = (
    "no socket interface found",
    "no NCCL_SOCKET_IFNAME interface",
    "Socket creation failed : Address family not supported",
    "No usable listening interface found",
)
_SHM = (
    "shared memory segment",
    "failed to extend /dev/shm",
    "posix_fallocate failed",
    "ncclShmOpen",
)


def read(message: str, header: NcclHeader | None) -> list[tuple[str, dict]]:
    """Facts in one NCCL message; `header` is None for a message without NCCL's prefix."""
    found = _setup(message) if header is None or header.level != "WARN" else []
    found += _failures(message, header)
    benign = any(marker in message for marker in _BENIGN)
    if header is not None and header.level == "WARN" and not found and not benign:
        found.append((ev.NCCL_WARN, {"message": message, "location": header.location}))
    return found


# aws-ofi-nccl's choice among libfabric's providers (src/nccl_ofi_net.cpp, 1.x):
# "Selected Provider is %s (found %d nics)", "Selected Provider is %s".
_OFI_PROVIDER = Pattern(r".*?Selected Provider is (\S+)")


def _setup(message: str) -> list[tuple[str, dict]]:
    """INFO messages: what NCCL chose and found."""
    if "Selected Provider is " in message and (m := _OFI_PROVIDER.match(message)):
        return [(ev.OFI_PROVIDER, {"provider": m.group(1)})]
    if message.startswith("NCCL version ") and (m := _VERSION.match(message)):
        return [(ev.VERSION, {"version": m.group(1)})]
    if "nranks" in message and "comm 0x" in message and (m := _COMM.match(message)):
        # A communicator NCCL destroyed (ncclCommDestroy's `- Destroy COMPLETE`) had completed
        # its init: a log that kept only its end still shows the init done.
        done = "Init COMPLETE" in message or "Destroy COMPLETE" in message
        phase = "COMPLETE" if done else "START"
        fields = {"comm": m.group(1), "rank": int(m.group(2)), "nranks": int(m.group(3))}
        return [(ev.COMM, {**fields, "phase": phase})]
    if "Init timings" in message and (m := _TIMINGS.match(message)):
        return [(ev.INIT_TIME, {"seconds": float(m.group(1))})]
    if message.startswith("Using network "):
        return [(ev.NETWORK, {"name": message.removeprefix("Using network ").strip()})]
    if message.startswith(("NET/IB : Using", "NET/IB: Using")):
        return [_ib_devices(message)]
    if message.startswith(("NET/Socket : Using", "NET/Socket: Using", "NET : Using interface")):
        return [(ev.SOCKET_IFS, {"interfaces": _interfaces(message)})]
    if message.startswith(("Bootstrap : Using", "Bootstrap: Using")):
        return [(ev.BOOTSTRAP_IFS, {"interfaces": _interfaces(message)})]
    if message.startswith(("NET/IB : No device found", "NET/IB: No device found")):
        return [(ev.IB_MISSING, {})]
    if message.startswith(("Channel ", "Ring ")) and " via " in message:
        m = _CHANNEL.match(message)
        return [(ev.CHANNEL, {"via": m.group(1)})] if m else []
    if " set " in message and " to " in message and (m := _ENV.match(message)):
        return [(ev.ENV, {"name": m.group(1), "value": m.group(2).strip()})]
    if message.startswith("cudaDriverVersion") and (m := _DRIVER.match(message)):
        return [(ev.DRIVER, {"version": int(m.group(1))})]
    if "GPU Direct RDMA Disabled for HCA" in message and (m := _GDR_HCA.search(message)):
        return [(ev.GDR_DISABLED, {"hca": m.group(1)})]
    return _plugin(message) + _trail(message)


def _plugin(message: str) -> list[tuple[str, dict]]:
    if "Plugin load" in message and "returned" in message and "NET/Plugin" in message:
        # NCCL prints dlopen's error: the plugin itself missing is a normal system without
        # one; anything else (a dependency missing, a symbol version such as FABRIC_1.7 not
        # found) is a plugin that exists and could not load, and NCCL falls back silently.
        error = message.rsplit(" : ", 1)[-1]
        missing = "No such file" in error or "cannot open shared object" in error
        if missing and error.lstrip().startswith("libnccl-net"):
            return [(ev.PLUGIN, {"plugin": "internal"})]
        return [(ev.PLUGIN_BROKEN, {"error": error.strip()[:300]})]
    if message.startswith("Plugin Path : "):
        return [(ev.PLUGIN, {"plugin": message.removeprefix("Plugin Path : ").strip()})]
    if "libnccl-net.so" in message and (
        "No plugin found" in message or "Could not find" in message
    ):
        return [(ev.PLUGIN, {"plugin": "internal"})]
    return []


def _trail(message: str) -> list[tuple[str, dict]]:
    if " -> " in message and (m := _TRAIL.match(message)):
        code = int(m.group(2))
        if code:
            return [(ev.ERROR_TRAIL, {"code": code, "location": m.group(1)})]
    return []


def _ib_devices(message: str) -> tuple[str, dict]:
    body, _, oob = message.partition("; OOB ")
    devices = []
    for token in body.split()[3:] if body.startswith("NET/IB :") else body.split()[2:]:
        if token.startswith("[") and (m := _DEVICE.match(token)):
            for name in m.group(2).split("+"):  # merged NICs: [0]mlx5_0+mlx5_1:1/RoCE
                devices.append((name, m.group(3), m.group(4) or "IB"))
    oob_name = oob.split(":", 1)[0].strip() if oob else None
    return (ev.IB_DEVICES, {"devices": devices, "oob": oob_name})


def continued_interfaces(text: str) -> list[tuple[str, str]]:
    """The interfaces of a line that holds nothing else: where a paste or terminal wrapped
    NCCL's one-line `Using [0]eth0:10.0.0.1<0> [1]...` list, its rest follows on such lines."""
    tokens = text.split()
    found = []
    for token in tokens[:64] if len(tokens) <= 64 else ():
        m = _INTERFACE.match(token) if "<" in token else None
        if m is None or m.end() != len(token):
            return []
        found.append((m.group(1), m.group(2)))
    return found


def _interfaces(message: str) -> list[tuple[str, str]]:
    """`[0]eth0:10.0.0.1<0> [1]veth1:fe80::1%veth1<0>` or `eth0:10.0.0.1<0>`."""
    found = []
    for token in message.split()[2:]:
        if "<" in token and (m := _INTERFACE.match(token)):
            found.append((m.group(1), m.group(2)))
    return found


def _failures(message: str, header: NcclHeader | None) -> list[tuple[str, dict]]:
    location = header.location if header else None
    if any(marker in message for marker in _SHM):
        no_space = "No space left" in message or "posix_fallocate" in message
        return [(ev.SHM_FAILURE, {"message": message, "no_space": no_space})]
    if "Got completion" in message and (m := _COMPLETION.match(message)):
        peer = m.group(1)
        if peer and (p := _PEER.match(peer)):
            peer = p.group(1)
        vendor = int(m.group(3)) if m.group(3) else None
        return [(ev.IB_COMPLETION, {"status": int(m.group(2)), "peer": peer, "vendor": vendor})]
    if "Call to ibv_" in message and (m := _IBV.match(message)):
        reason = (m.group(3) or "").strip()
        return [
            (
                ev.IBV_CALL,
                {"call": m.group(1), "reason": reason, "errno": m.group(2), "device": m.group(4)},
            )
        ]
    if "Unable to open device" in message and (m := _OPEN.match(message)):
        return [(ev.IB_OPEN, {"device": m.group(1)})]
    if "Got async event" in message and (m := _ASYNC.match(message)):
        return [(ev.IB_ASYNC, {"event": m.group(2).strip(), "device": m.group(1)})]
    if "NET/OFI" in message and (header is None or header.level == "WARN"):
        memory = "register memory" in message and "allocate memory" in message
        return [(ev.OFI, {"message": message, "memory": memory})]
    return _sockets(message) + _gpu(message, location)


def _sockets(message: str) -> list[tuple[str, dict]]:
    if any(marker in message for marker in _NO_INTERFACE):
        return [(ev.NO_INTERFACE, {"message": message})]
    if "is neither AF_INET" in message:
        return [(ev.BAD_ADDRESS_FAMILY, {"message": message})]
    if "Connect to " in message and " failed : " in message and (m := _CONNECT.match(message)):
        address = m.group(1)
        if p := _PEER.match(address):
            address = p.group(1)
        return [(ev.SOCKET_CONNECT, {"address": address, "reason": m.group(2).strip()})]
    if "Call to connect" in message and (m := _CONNECT_OLD.match(message)):
        return [
            (
                ev.SOCKET_CONNECT,
                {"address": None, "reason": m.group(1).strip(), "retrying": bool(m.group(2))},
            )
        ]
    if "Connection closed by remote peer" in message:
        return [(ev.SOCKET_CONNECT, {"address": None, "reason": "connection closed by peer"})]
    return []


def _gpu(message: str, location: str | None) -> list[tuple[str, dict]]:
    if "Duplicate GPU detected" in message and (m := _DUPLICATE.match(message)):
        ranks = sorted({int(m.group(1)), int(m.group(2))})
        return [(ev.DUPLICATE_GPU, {"ranks": ranks, "device": m.group(3)})]
    if "failed to open CUDA IPC handle" in message and (m := _IPC.match(message)):
        return [
            (ev.CUDA_FAILURE, {"code": int(m.group(1)), "error": m.group(2), "location": location})
        ]
    if "NCCL failure common" in message and (m := _TEST_FAILURE.match(message)):
        return [(ev.TESTS_FAILURE, {"message": m.group(2).strip(" /"), "location": m.group(1)})]
    if ("Cuda failure" in message or "CUDA failure" in message) and (m := _CUDA.match(message)):
        code = int(m.group(1)) if m.group(1) else None
        where = location or m.group(2)
        return [(ev.CUDA_FAILURE, {"code": code, "error": m.group(3), "location": where})]
    if "Mismatched collective detected" in message:
        return [(ev.MISMATCH, {"ranks": [], "ops": [], "detail": message})]
    # The bootstrap's "Message truncated : received" is ranks disagreeing on the bootstrap's
    # own messages (NCCL versions that differ), which the catalog names; only the socket
    # transport's "message truncated : receiving" is a collective of different sizes.
    bootstrap = "Message truncated : received" in message
    if "bytes instead of" in message and not bootstrap and (m := _TRUNCATED.match(message)):
        detail = f"received {m.group(1)} bytes where {m.group(2)} were expected"
        return [(ev.MISMATCH, {"ranks": [], "ops": [], "detail": detail})]
    for marker, kind in _TOPOLOGY:
        if marker in message and (marker != "Attribute " or "not found" in message):
            return [(ev.TOPOLOGY, {"message": message, "kind": kind})]
    return []
