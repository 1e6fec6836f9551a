"""The doctor's reading speed: lines per second of `parse` on 10,000 and 100,000 lines of
an NCCL job's log, beside a peer in the same run.

The log mixes what a failing 64-rank job prints: NCCL INFO setup lines, training progress,
catalogued warnings (an IB async event, a plugin fallback) and lines nobody knows. The peer
reads the same lines by trying every catalogued format's pattern on each line (what the
message catalog would cost without its anchor index), on a tenth of the lines; the ratio
shows what the index saves, and the two sizes show that the cost per line does not grow
with the log.
"""

from __future__ import annotations

import time

from trainops.doctor import catalog, parse
from trainops.doctor.sources import memory_stream

SIZES = (10_000, 100_000)
PEER_SAMPLE = 1_000

_LINES = (
    "node-{n}:41:58 [{d}] NCCL INFO Channel 0{d}/0 : {r}[{d}] -> {p}[0] [send] via NET/IB/0/GDRDMA",
    "node-{n}:41:58 [{d}] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1",
    "[rank{r}]: step {s} | loss 2.{s} | 1.21 s/step",
    "node-{n}:41:60 [{d}] transport/net_ib.cc:92 NCCL WARN NET/IB : mlx5_{d}:1 Got async event : "
    "port active",
    "node-{n}:41:58 [{d}] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal "
    "network plugin.",
    "[rank{r}]: data loader worker {d} finished shard {s}",
    "2026-12-01 10:00:{d}0,123 - INFO - evaluation accuracy 0.{s}",
)


def log(count: int) -> list[str]:
    return [
        _LINES[i % len(_LINES)].format(n=i % 8, d=i % 8, r=i % 64, p=(i + 1) % 64, s=i % 997)
        for i in range(count)
    ]


def _every_pattern(lines: list[str]) -> int:
    patterns = [
        catalog.compile_format(fmt, within)[0]
        for e in catalog.entries()
        if e.component != "xid"
        for fmt, within in catalog.formats_of(e)
    ]
    found = 0
    for line in lines:
        for pattern in patterns:
            if pattern.search(line):
                found += 1
                break
    return found


def run() -> dict:
    catalog.index()
    parse.parse([memory_stream("warm-up.log", log(2_000))])
    results = {}
    print("\ndoctor: lines per second of parse (catalog index built once beforehand)")
    for size in SIZES:
        lines = log(size)
        start = time.perf_counter()
        events = parse.parse([memory_stream("job.log", lines)])
        seconds = time.perf_counter() - start
        results[f"doctor parse {size:,} lines/s"] = size / seconds
        print(f"  {size:>7,} lines: {size / seconds:>10,.0f} lines/s ({len(events)} events kept)")
    sample = log(PEER_SAMPLE)
    start = time.perf_counter()
    _every_pattern(sample)
    peer = PEER_SAMPLE / (time.perf_counter() - start)
    results["catalog without index lines/s"] = peer
    ours = results[f"doctor parse {SIZES[0]:,} lines/s"]
    print(f"  peer, every catalogued pattern on each line: {peer:,.0f} lines/s")
    print(f"  ratio (parse with the index / every pattern): {ours / peer:.1f}x")
    ratio = results[f"doctor parse {SIZES[1]:,} lines/s"] / ours
    print(f"  lines/s at 100,000 against 10,000: {ratio:.2f} (1.0 = constant cost per line)")
    return {"doctor": results}
