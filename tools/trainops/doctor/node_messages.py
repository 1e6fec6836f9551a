"""What the NVIDIA driver writes to a node's kernel log (dmesg, journalctl -k): Xid events,
a GPU that fell off the bus, a GPU the driver could not initialise.

Lines keep whatever dmesg or journald put in front (`[ 1843.308145] `,
`Feb 14 05:03:41 host kernel: `); the driver's text is found by its fixed wording.
"""

from __future__ import annotations

from trainops.doctor import events as ev
from trainops.doctor.limits import Pattern

_XID = Pattern(r".*?NVRM: Xid \((?:PCI:)?([^)]*)\): (\d+)(?:, (.*))?")
_OFF_BUS = Pattern(r".*?(?:GPU at PCI:|NVIDIA GPU )(\S+)")


def read(text: str) -> list[tuple[str, dict]]:
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
