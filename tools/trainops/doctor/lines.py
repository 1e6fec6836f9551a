"""One log line as collection left it, turned into text the parsers can read.

Collection adds prefixes: `kubectl logs --prefix` (`[pod/NAME/CONTAINER] `) and
`--timestamps` (RFC 3339), timestamps of the other common forms (`2024-05-01 12:00:00,123`,
bracketed, epoch seconds, `12:00:00.123`), `srun -l` (`3: `), `mpirun --tag-output`
(`[1,3]<stdout>:`), PyTorch's `[rank3]:`, torchx's `[trainer0|0]:`, Ray's
`(RayWorker pid=123)`, Loki's `{pod="..."}` labels, ANSI colour (or its remnants once a
paste dropped the escape character), Markdown quotes and backticks; log collectors wrap a
line in JSON (`{"log": ...}`, `{"message": ...}`, CloudWatch and Loki exports). `clean`
removes all of it and keeps the rank or pod it names.

NCCL writes `host:pid:tid [dev] NCCL INFO msg`, with `file:line` before the level on
warnings (`host:pid:tid [dev] transport/net_ib.cc:1295 NCCL WARN msg`, and the function
after it from 2.28: `net_ib.cc:1295 (ncclIbInit) NCCL WARN`), an optional
timestamp first, and pastes often drop everything before the level; NCCL 2.2-2.3 wrote
the level without `NCCL`. `nccl_header` finds the level with `str.find` and reads the
few tokens before it from the right, so no pattern ever scans a whole line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from trainops.doctor.limits import Pattern

_ANSI = Pattern(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
_ANSI_REMNANT = Pattern(r"(?:\[[0-9;]{1,16}m\s*)+")
_KUBECTL_PREFIX = Pattern(r"\[pod/([^/\]\s]{1,253})/[^\]\s]{1,253}\] ")
_TIMESTAMP = Pattern(
    r"\[?(?:\d{4}-\d\d-\d\d[T ])?\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?: ?(?:Z|UTC|[+-]\d\d:?\d\d))?\]?"
    r"(?:\s*[|\t-]\s*|\s+)"
)
_EPOCH = Pattern(r"\[?1\d{9}(?:\.\d{1,9})?\]?\s+")
_RAY = Pattern(r"\((?:[\w.-]{1,64} )?pid=\d{1,9}(?:, ip=[\d.:a-fA-F]{1,45})?\) ?")
_LOKI_LABELS = Pattern(r"\{([^{}]{0,2048})\} ")
_LOKI_POD = Pattern(r'.*?\bpod(?:_name)?="([^"]{1,253})"')
_SRUN = Pattern(r"\s{0,8}(\d{1,6}): ")
_MPIRUN = Pattern(r"\[\d{1,9},(\d{1,9})\]<(?:stdout|stderr)>: ?")
_TORCH_RANK = Pattern(r"\[rank(\d{1,9})\]: ?")
_LABEL = Pattern(r"\[([\w.|-]{1,64})\]: ?")
_QUOTE = Pattern(r"(?:>\s?)+")
MAX_JSON_LINE = 1 << 16  # a JSON-wrapped line is decoded only up to this size
# Keys log collectors put a line under: Docker/fluentd, CloudWatch, Loki, GCP, journald.
_MESSAGE_KEYS = ("log", "message", "msg", "line", "textPayload", "MESSAGE", "@message")

LEVELS = ("WARN", "INFO", "TRACE", "ABORT")


@dataclass
class Clean:
    text: str
    rank: int | None = None  # from `[rankN]:`, `[job,N]<stdout>:` or `srun -l`
    pod: str | None = None  # from `kubectl logs --prefix`


def clean(raw: str) -> Clean:
    """Strip what collection put in front of a line; keep the rank or pod it names."""
    text = raw
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    result = Clean(text)
    for _ in range(8):  # prefixes stack (kubectl --prefix, then a timestamp, then [rankN]:)
        text = result.text
        stripped = text.strip() if text.rstrip().endswith("}") else text.lstrip()
        if stripped.startswith("{") and stripped.endswith("}"):
            result.text = _unwrap_json(stripped, result)
        elif stripped.startswith("`") and stripped.rstrip().endswith("`"):
            result.text = stripped.strip().strip("`")
        elif stripped.startswith(("[", ">", "(", "{")) or stripped[:1].isdigit():
            result.text = _strip_one(stripped, result)
        if result.text == text:
            break
    return result


def _unwrap_json(text: str, result: Clean) -> str:
    """The line a collector wrapped in JSON, and the pod its metadata names."""
    if len(text) > MAX_JSON_LINE:
        return text
    try:
        record = json.loads(text)
    except ValueError:
        return _strip_one(text, result)
    if not isinstance(record, dict):
        return text
    kubernetes = record.get("kubernetes")
    if isinstance(kubernetes, dict) and isinstance(kubernetes.get("pod_name"), str):
        result.pod = kubernetes["pod_name"]
    for key in _MESSAGE_KEYS:
        value = record.get(key)
        if isinstance(value, str):
            return value.rstrip("\n")
    return text


def _strip_one(text: str, result: Clean) -> str:
    if text.startswith(">"):
        found = _QUOTE.match(text)
        return text[found.end() :] if found else text
    if text.startswith("{"):  # Loki's labels before the line (logcli's default output)
        found = _LOKI_LABELS.match(text)
        if found is None:
            return text
        if (pod := _LOKI_POD.match(found.group(1))) is not None:
            result.pod = pod.group(1)
        return text[found.end() :]
    for pattern, field in (
        (_KUBECTL_PREFIX, "pod"),
        (_MPIRUN, "rank"),
        (_TORCH_RANK, "rank"),
        (_TIMESTAMP, None),
        (_EPOCH, None),
        (_RAY, None),
        (_ANSI_REMNANT, None),
        (_SRUN, "rank"),
        (_LABEL, None),
    ):
        found = pattern.match(text)
        if found is None:
            continue
        if field == "pod":
            result.pod = found.group(1)
        elif field == "rank" and result.rank is None:
            result.rank = int(found.group(1))
        return text[found.end() :]
    return text


@dataclass
class NcclHeader:
    """What precedes NCCL's level keyword, and the message after it."""

    level: str
    message: str
    host: str | None = None
    pid: str | None = None
    device: int | None = None
    location: str | None = None  # file:line or function:line of a WARN


def _level_at(text: str) -> tuple[int, int, str] | None:
    """(start of level keyword, start of message, level), the earliest in the line."""
    best = None
    for level in LEVELS:
        for marker in (f"NCCL {level} ", f"NCCL {level}"):
            at = text.find(marker)
            if at < 0:
                continue
            if marker.endswith(" ") or at + len(marker) == len(text):
                if best is None or at < best[0]:
                    best = (at, at + len(marker), level)
                break
    if best is not None:
        return best
    for level in ("WARN", "INFO"):  # NCCL 2.2-2.3: `host:pid:tid [dev] INFO msg`
        at = text.find(f" {level} ")
        if at > 0 and _legacy_marker(text[:at]):
            return (at + 1, at + len(level) + 2, level)
    return None


def _legacy_marker(prefix: str) -> bool:
    """The token before a bare INFO/WARN must be NCCL's `[dev]` or a `file.h:123`."""
    last = prefix.rsplit(None, 1)[-1] if prefix.strip() else ""
    if last.startswith("[") and last.endswith("]") and last[1:-1].isdigit():
        return True
    name, _, line = last.rpartition(":")
    return bool(line.isdigit() and name.endswith((".h", ".cc", ".cu", ".c")))


def nccl_header(text: str) -> NcclHeader | None:
    found = _level_at(text)
    if found is None:
        return None
    at, message_start, level = found
    header = NcclHeader(level=level, message=text[message_start:].strip())
    tokens = text[max(0, at - 512) : at].split()[-5:]
    if tokens and tokens[-1].startswith("(") and tokens[-1].endswith(")"):
        tokens.pop()  # 2.28 on: the function after file:line, `net_ib.cc:92 (ncclIbInit)`
    if tokens and _is_location(tokens[-1]):
        header.location = tokens.pop()
    if tokens and tokens[-1].startswith("[") and tokens[-1].endswith("]"):
        device = tokens.pop()[1:-1]
        header.device = int(device) if device.isdigit() else None
    if tokens:
        host, pid = _host_pid(tokens[-1])
        header.host, header.pid = host, pid
    return header


def _is_location(token: str) -> bool:
    name, _, line = token.rpartition(":")
    return bool(name) and line.isdigit() and not token.startswith("[")


def _host_pid(token: str) -> tuple[str | None, str | None]:
    """`host:pid:tid`, `host:pid`; a redacted pid (`XXXXXX`) keeps the host."""
    parts = token.split(":")
    if len(parts) < 2 or not parts[0]:
        return None, None
    if len(parts) >= 3 and parts[-1].isdigit() and parts[-2].isdigit():
        return ":".join(parts[:-2]), parts[-2]
    if parts[-1].isdigit() or parts[-1].isalpha():
        return ":".join(parts[:-1]), parts[-1]
    return None, None
