"""What the NVIDIA driver writes to a node's kernel log (dmesg, journalctl -k): Xid events,
a GPU that fell off the bus, a GPU the driver could not initialise; the kernel's OOM
killer ending a process; and the kernel refusing Open MPI's cross-memory attach.

Lines keep whatever dmesg or journald put in front (`[ 1843.308145] `,
`Feb 14 05:03:41 host kernel: `); the driver's text is found by its fixed wording.
"""

from __future__ import annotations

from trainops.doctor import events as ev
from trainops.doctor.limits import Pattern

_XID = Pattern(r".*?NVRM: Xid \((?:PCI:)?([^)]*)\): (\d+)(?:, (.*))?")
_OFF_BUS = Pattern(r".*?(?:GPU at PCI:|NVIDIA GPU )(\S+)")


# The Linux OOM killer (mm/oom_kill.c, __oom_kill_process): "%s: Killed process %d (%s)
# total-vm:..." where %s is "Out of memory" or "Memory cgroup out of memory"; the kubelet and
# the container runtime report the container as "OOMKilled".
_OOM_KILLED = Pattern(r".*?(?:[Oo]ut of memory: Killed process (\d+)|\bOOMKilled\b)")


# Open MPI's shared-memory transport (opal/mca/btl/vader/btl_vader_get.c,
# mca_btl_vader_get_cma): `opal_output(0, "Read %ld, expected %lu, errno = %d\n", ...)` when
# process_vm_readv, the kernel's cross-memory attach, fails.
_CMA_READ = Pattern(r".*?Read (-?\d+), expected (\d+), errno = (\d+)")


def read(text: str) -> list[tuple[str, dict]]:
    if "expected" in text and "errno = " in text and (m := _CMA_READ.match(text)):
        return [(ev.CMA_DENIED, {"errno": int(m.group(3))})]
    if ("Killed process" in text or "OOMKilled" in text) and (m := _OOM_KILLED.match(text)):
        return [(ev.CHILD_FAILED, {"exitcode": -9, "signal": "SIGKILL", "oom": True})]
    if "NVRM" not in text and "fallen off the bus" not in text:
        return []
    if "Xid" in text and (m := _XID.match(text)):
        return [(ev.XID, {"code": int(m.group(2)), "pci": m.group(1), "detail": m.group(3) or ""})]
    if "fallen off the bus" in text or "has fallen off" in text:
        m = _OFF_BUS.match(text)
        return [(ev.OFF_BUS, {"pci": m.group(1) if m else None})]
    if "RmInitAdapter failed" in text or "rm_init_adapter failed" in text:
        return [(ev.GPU_INIT, {"detail": text.split("NVRM:", 1)[-1].strip()})]
    return []
