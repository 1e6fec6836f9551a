"""nccl-tests output (all_reduce_perf and friends) into runs, and a sweep's runs into the
slow nodes and links.

A run is one test invocation: its ranks and hosts (`#  Rank  0 Group  0 Pid 1 on HOST
device 0 ...`), its result rows (size, count, type, redop, [root], then time, algbw, busbw
and #wrong out of place and in place), `# Out of bounds values`, `# Avg bus bandwidth`,
and failures (`Test NCCL failure common.cu:958 '...'`). A pairwise sweep is many runs,
one per pair of nodes; a summary of one (`nodeA,nodeB  49.36`, one pair and its bus
bandwidth per line) is read as such runs too.

The bandwidth of a run is the bus bandwidth of its largest message. Runs are compared with
the sweep's own reference (the median of its better half): a node whose every run is slow
is a slow node; a slow run between nodes that are fast with others is a slow link.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from trainops.doctor.findings import CATEGORY
from trainops.doctor.limits import Pattern
from trainops.doctor.sources import FlightRecorderDump, Source
from trainops.model import ERROR, WARNING
from trainops.rules import RuleInfo, register

_RANK = Pattern(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device")
_AVG = Pattern(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_BOUNDS = Pattern(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_SUMMARY = Pattern(r"\s*([\w.-]+(?:,[\w.-]+)+)\s+(\d+(?:\.\d+)?)(?:\s|$)")
_FAILURE_MARKERS = ("Test NCCL failure", "Test CUDA failure", "Test failure", "Cuda failure common")
TYPES = frozenset(
    "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 float16 float32 float64 "
    "bf16 fp16 fp32 fp64 fp8_e4m3 fp8_e5m2 f8e4m3 f8e5m2 int uint".split()
)


@dataclass
class Run:
    source: str
    hosts: list[str] = field(default_factory=list)
    ranks: int = 0
    size: int | None = None  # largest message measured
    busbw: float | None = None  # at the largest message
    average: float | None = None  # `# Avg bus bandwidth`
    wrong: int = 0
    failures: list[str] = field(default_factory=list)
    summary: bool = False  # from a `hostA,hostB busbw` line

    @property
    def nodes(self) -> list[str]:
        return sorted(set(self.hosts))

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "nodes": self.nodes,
            "ranks": self.ranks,
            "size": self.size,
            "busbw": self.busbw,
            "average_busbw": self.average,
            "wrong": self.wrong,
            "failures": self.failures,
        }


def _row(text: str) -> tuple[int, float, int] | None:
    """(size, busbw, wrong) from a result row, or None."""
    tokens = text.split()
    if len(tokens) < 11 or not tokens[0].isdigit() or tokens[2] not in TYPES:
        return None
    values = tokens[-8:]
    bandwidths = [_number(values[2]), _number(values[6])]
    measured = [b for b in bandwidths if b is not None]
    if not measured:
        return None
    wrong = sum(int(v) for v in (values[3], values[7]) if v.isdigit())
    return int(tokens[0]), max(measured), wrong


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # N/A
        return None


def read_runs(sources: Iterable[Source]) -> list[Run]:
    runs: list[Run] = []
    for source in sources:
        if isinstance(source, FlightRecorderDump):
            continue
        current: Run | None = None
        for number, line in enumerate(source.open_lines(), 1):
            text = line.strip()
            if text.startswith("# nThread") or text.startswith("# Collective test starting"):
                if current is None or current.size is not None or current.failures:
                    current = Run(f"{source.name}:{number}")
                    runs.append(current)
                continue
            if m := _SUMMARY.match(text):
                runs.append(
                    Run(
                        f"{source.name}:{number}",
                        m.group(1).split(","),
                        busbw=float(m.group(2)),
                        summary=True,
                    )
                )
                continue
            if current is None:
                if "Rank" in text or any(marker in text for marker in _FAILURE_MARKERS):
                    current = Run(f"{source.name}:{number}")
                    runs.append(current)
                else:
                    continue
            _read_line(current, text)
    return [r for r in runs if r.busbw is not None or r.failures or r.wrong or r.ranks]


def _read_line(run: Run, text: str) -> None:
    if text.startswith("#"):
        if m := _RANK.match(text):
            run.ranks += 1
            run.hosts.append(m.group(3))
        elif m := _AVG.match(text):
            run.average = float(m.group(1))
        elif (m := _BOUNDS.match(text)) and m.group(2) != "OK":
            run.wrong = max(run.wrong, int(m.group(1)))  # the rows' #wrong, summed by the test
        return
    if any(marker in text for marker in _FAILURE_MARKERS):
        if len(run.failures) < 8:
            run.failures.append(text[:300])
        return
    row = _row(text)
    if row is not None:
        size, busbw, wrong = row
        run.wrong += wrong
        if run.size is None or size >= run.size:
            run.size, run.busbw = size, busbw


def _info(rule_id: str, severity: str, title: str, why: str, fix: str) -> RuleInfo:
    return register(RuleInfo(rule_id, severity, title, why, fix, category=CATEGORY))


FAILED = _info(
    "nccl-tests-failed",
    ERROR,
    "nccl-tests runs complete",
    "A failed test run stops before measuring; the NCCL and CUDA lines in its output name "
    "the cause.",
    "Fix the cause named alongside (the same log is read for NCCL failures), then rerun.",
)
WRONG = _info(
    "nccl-tests-wrong-results",
    ERROR,
    "nccl-tests results are correct",
    "Wrong values in a collective mean silent data corruption: a GPU, NVLink or NIC is faulty.",
    "Cordon the nodes of that run, run DCGM diagnostics (level 3) on them and keep them out "
    "of training until they pass.",
)
FLOOR = _info(
    "nccl-tests-below-floor",
    ERROR,
    "nccl-tests bus bandwidth meets the fabric's floor",
    "A run below the bus bandwidth the fabric should deliver points at a slow node, link or "
    "a fallback (TCP sockets, no GPUDirect).",
    "Compare with a pairwise sweep to find the node or link, and read the run's NCCL lines "
    "(`trainops doctor nccl`) for the transport it used.",
)
SLOW_NODE = _info(
    "nccl-tests-slow-node",
    ERROR,
    "No node is slow in every run",
    "A node slow with every partner has a slow NIC, link, PCIe path or GPU.",
    "Cordon the node, check its NICs (link speed, errors), PCIe and GPUs (DCGM diagnostics), "
    "and rerun a pair with a known-good node.",
)
SLOW_PAIR = _info(
    "nccl-tests-slow-pair",
    ERROR,
    "No link between two nodes is slow",
    "Two nodes that are fast with other partners but slow together share a bad link or "
    "switch path.",
    "Check the switch ports and cables between the two nodes (counters, link speed, routing).",
)
NO_RESULTS = _info(
    "nccl-tests-no-results",
    ERROR,
    "nccl-tests prints a result for every run it starts",
    "A run that listed its ranks and printed no result line and no failure hung in its first "
    "collective (or its output was cut): nccl-tests prints a row per size as it measures.",
    "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read it with `trainops doctor "
    "nccl`; a hang in the first collective is usually peer-to-peer or network traffic that "
    "never arrives (PCIe ACS or the IOMMU on, a firewall, an interface other nodes cannot reach).",
)
SLOW_RUN = _info(
    "nccl-tests-slow-run",
    WARNING,
    "Runs of a sweep are equally fast",
    "A slow run whose nodes were measured with no other partner cannot be pinned on a node "
    "or a link.",
    "Rerun each of its nodes with a known-good node.",
)


@dataclass
class TestFinding:
    rule: str
    severity: str
    message: str
    fix: str
    nodes: list[str]
    evidence: list[str]


def _finding(
    info: RuleInfo, message: str, runs: list[Run], nodes: Iterable[str] = ()
) -> TestFinding:
    evidence = [
        f"{r.source}: {', '.join(r.nodes) or '?'} {r.busbw if r.busbw is not None else '-'} GB/s"
        for r in runs[:5]
    ]
    return TestFinding(info.id, info.severity, message, info.fix, sorted(set(nodes)), evidence)


def analyse(runs: list[Run], min_busbw: float | None, fraction: float) -> list[TestFinding]:
    found: list[TestFinding] = []
    for run in runs:
        nodes = ", ".join(run.nodes) or "unknown nodes"
        if run.failures:
            found.append(
                _finding(FAILED, f"the run on {nodes} failed: {run.failures[0]}", [run], run.nodes)
            )
        elif run.busbw is None and not run.wrong and not run.summary:
            found.append(
                _finding(
                    NO_RESULTS,
                    f"the run on {nodes} listed {run.ranks} rank(s) and printed no result line "
                    "and no failure: it hung (or its output was cut)",
                    [run],
                    run.nodes,
                )
            )
        if run.wrong:
            found.append(
                _finding(
                    WRONG, f"the run on {nodes} returned {run.wrong} wrong values", [run], run.nodes
                )
            )
        if min_busbw is not None and run.busbw is not None and run.busbw < min_busbw:
            found.append(
                _finding(
                    FLOOR,
                    f"the run on {nodes} reached {run.busbw:g} GB/s bus bandwidth, below the "
                    f"floor of {min_busbw:g} GB/s",
                    [run],
                    run.nodes,
                )
            )
    found += list(_sweep([r for r in runs if r.busbw is not None and r.nodes], fraction))
    return found


def _sweep(runs: list[Run], fraction: float) -> Iterator[TestFinding]:
    if len(runs) < 3:
        return
    values = sorted(r.busbw for r in runs)
    reference = statistics.median(values[len(values) // 2 :])
    limit = fraction * reference
    slow = [r for r in runs if r.busbw < limit]
    if not slow:
        return
    by_node: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        for node in run.nodes:
            by_node[node].append(run)
    bad_nodes = sorted(
        node
        for node, node_runs in by_node.items()
        if len(node_runs) >= 2 and all(r in slow for r in node_runs)
    )
    for node in bad_nodes:
        node_runs = by_node[node]
        yield _finding(
            SLOW_NODE,
            f"node {node} is slow: all {len(node_runs)} runs with it stay below {limit:.3g} GB/s "
            f"({fraction:g} of the sweep's reference {reference:.3g} GB/s)",
            node_runs,
            [node],
        )
    for run in slow:
        if any(node in bad_nodes for node in run.nodes):
            continue
        fast_elsewhere = [node for node in run.nodes if any(r not in slow for r in by_node[node])]
        pair = " and ".join(run.nodes)
        if len(fast_elsewhere) == len(run.nodes):
            yield _finding(
                SLOW_PAIR,
                f"the link between {pair} is slow: {run.busbw:g} GB/s together (reference "
                f"{reference:.3g} GB/s) while each is fast with other nodes",
                [run],
                run.nodes,
            )
        else:
            yield _finding(
                SLOW_RUN,
                f"the run on {pair} is slow ({run.busbw:g} GB/s, reference {reference:.3g} GB/s); "
                "the sweep has no other run to tell whether a node or the link is at fault",
                [run],
                run.nodes,
            )
