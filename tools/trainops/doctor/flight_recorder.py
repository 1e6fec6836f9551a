"""PyTorch Flight Recorder dumps (the JSON form) into per-rank collective states.

A dump holds the last collectives of one rank: per entry its process group, its
`collective_seq_id`, its `profiling_name` (`nccl:all_reduce`) and its `state`
(`scheduled`, `started`, `completed`). For each process group the doctor keeps the last
completed sequence number, the first collective that did not complete, and the
operation at each sequence number, so ranks can be compared. The rank comes from a
`rank` key when the dump has one, else from the digits that end the file name
(`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` appends the rank). Pickled dumps never get here.
"""

from __future__ import annotations

import os

from trainops.doctor import events as ev
from trainops.doctor.events import Event, ProcessKey
from trainops.doctor.sources import FlightRecorderDump

MAX_ENTRIES = 100_000


def _rank(dump: FlightRecorderDump) -> int | None:
    value = dump.data.get("rank")
    if isinstance(value, int) and value >= 0:
        return value
    name = os.path.basename(dump.name)
    digits = ""
    for char in reversed(name.removesuffix(".json")):
        if not char.isdigit():
            break
        digits = char + digits
    return int(digits) if digits else None


def _group(entry: dict) -> str:
    group = entry.get("process_group")
    if isinstance(group, list) and group and isinstance(group[0], str):
        return group[0]
    pg_id = entry.get("pg_id")
    return str(pg_id) if isinstance(pg_id, (int, str)) else "?"


def _operation(entry: dict) -> str:
    name = entry.get("profiling_name")
    if not isinstance(name, str):
        return "?"
    return name.removeprefix("nccl:").upper()


def read(dump: FlightRecorderDump) -> list[Event]:
    rank = _rank(dump)
    groups: dict[str, dict] = {}
    entries = dump.data.get("entries") or []
    for index, entry in enumerate(entries[:MAX_ENTRIES]):
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int):
            continue
        state = entry.get("state") if isinstance(entry.get("state"), str) else "?"
        group = groups.setdefault(
            _group(entry), {"completed": None, "pending": None, "ops": {}, "index": index}
        )
        group["ops"][seq] = _operation(entry)
        if state == "completed":
            group["completed"] = max(seq, group["completed"] or seq)
        elif group["pending"] is None or seq < group["pending"][0]:
            group["pending"] = (seq, _operation(entry), state)
    found = []
    for name, group in groups.items():
        pending = group["pending"]
        fields = {
            "rank": rank,
            "pg": name,
            "completed": group["completed"],
            "pending_seq": pending[0] if pending else None,
            "pending_op": pending[1] if pending else None,
            "pending_state": pending[2] if pending else None,
            "ops": group["ops"],
        }
        text = f"flight recorder: process group {name}, " + (
            f"collective #{pending[0]} {pending[1]} {pending[2]}"
            if pending
            else f"all collectives up to #{group['completed']} completed"
        )
        process = ProcessKey(None, None, rank) if rank is not None else None
        found.append(
            Event(ev.FR_STATE, dump.name, group["index"] + 1, text, 1, process, rank, fields)
        )
    return found
