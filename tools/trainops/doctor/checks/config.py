"""NCCL settings as the ranks echoed them (`X set by environment to Y`): overrides of
NCCL's own choices that break or slow jobs, values NCCL ignores, and NCCL versions that
differ between ranks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from trainops import nccl
from trainops.doctor import events as ev
from trainops.doctor.findings import Context, Found, check, who
from trainops.model import ERROR, WARNING

# Variables that replace a decision NCCL makes from the hardware; set by images, VM
# nccl.conf files or blog posts, they break jobs on any other shape.
HARMFUL = {
    "NCCL_GRAPH_FILE": "forces a ring/tree graph written for one machine shape; NCCL's "
    "developers say never to set it in production",
    "NCCL_P2P_USE_CUDA_MEMCPY": "replaces NCCL's P2P kernels with copy engines, an experimental "
    "path known to hang",
    "NCCL_IGNORE_NET_MISMATCH": "lets ranks with different network setups proceed, turning a "
    "clear error into a hang",
}


@check(
    "nccl-override-harmful",
    WARNING,
    "No NCCL setting overrides NCCL's own topology and transport choices",
    "Some variables replace what NCCL derives from the hardware; from an image, /etc/nccl.conf "
    "or ~/.nccl.conf they break jobs on any other machine shape.",
    "Unset them in the environment and remove them from /etc/nccl.conf and ~/.nccl.conf.",
)
def harmful(ctx: Context) -> Iterator[Found]:
    found = defaultdict(list)
    for event in ctx.of(ev.ENV):
        name, value = event.fields["name"], event.fields["value"]
        if name in HARMFUL and value not in ("", "0"):
            found[name].append(event)
    for name, events in sorted(found.items()):
        value = events[0].fields["value"]
        yield Found(
            f"{name}={value} is set on {who(events)}: it {HARMFUL[name]}",
            events,
            severity=ERROR if ctx.failed else WARNING,
        )


@check(
    "nccl-env-invalid",
    WARNING,
    "NCCL settings have values NCCL accepts",
    "NCCL ignores a value it does not understand without an error, so the setting silently "
    "does nothing.",
    "Correct the value (`trainops policies explain nccl-invalid-value` lists the accepted ones).",
    explains=False,
)
def invalid(ctx: Context) -> Iterator[Found]:
    seen = set()
    for event in ctx.of(ev.ENV):
        name, value = event.fields["name"], event.fields["value"]
        problem = nccl.check_value(name, value) if name.startswith("NCCL_") else None
        if problem and (name, value) not in seen:
            seen.add((name, value))
            yield Found(f"{name}={value} on {who([event])}: {problem}", [event])


@check(
    "nccl-version-mismatch",
    ERROR,
    "Every rank runs the same NCCL version and every node the same driver",
    "Ranks with different NCCL releases may use different protocols and hang or fail in "
    "ways that look like network trouble; a node with another driver is the node that differs.",
    "Run the same image on every node; check that LD_LIBRARY_PATH or LD_PRELOAD does not "
    "pick another libnccl on some of them.",
)
def versions(ctx: Context) -> Iterator[Found]:
    # Version lines without NCCL's prefix (pasted, or one log file per node) still say which
    # NCCL runs: a line with the host names it, the others their file.
    by_version = defaultdict(list)
    for event in ctx.of(ev.VERSION):
        by_version[event.fields["version"].split("+", 1)[0]].append(event)
    if len(by_version) > 1:
        parts = "; ".join(f"{v} on {_where(es)}" for v, es in sorted(by_version.items()))
        yield Found(
            f"ranks run different NCCL versions: {parts}",
            [es[0] for es in by_version.values()],
            severity=ERROR if ctx.failed else WARNING,
        )
    drivers = defaultdict(list)
    for event in ctx.of(ev.DRIVER):
        if event.process is not None and event.process.host:
            drivers[event.fields["version"]].append(event)
    if len(drivers) > 1:
        parts = "; ".join(
            f"CUDA driver API {v} on {_where(es)}" for v, es in sorted(drivers.items())
        )
        yield Found(
            f"nodes run different NVIDIA drivers: {parts}: the node that differs is the one to "
            "suspect",
            [es[0] for es in drivers.values()],
            severity=ERROR if ctx.failed else WARNING,
            fix="Run the same driver on every node of the job (the GPU Operator's ClusterPolicy "
            "pins it); drain the node whose driver differs until it is updated.",
        )


def _where(events) -> str:
    named = [e for e in events if e.process and e.process.host]
    if named:
        return who(named)
    return ", ".join(sorted({e.source for e in events})[:4])
