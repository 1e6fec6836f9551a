"""One log line as collection left it, turned into text the parsers can read.

Collection adds prefixes: `kubectl logs --prefix` (`[pod/NAME/CONTAINER] `) and
`--timestamps` (RFC 3339), `srun -l` (`3: `), `mpirun --tag-output` (`[1,3]<stdout>:`),
PyTorch's `[rank3]:`, torchx's `[trainer0|0]:`, ANSI colour (or its remnants once a paste
dropped the escape character) and Markdown quotes. `clean` removes them and keeps the
rank or pod they name.

NCCL writes `host:pid:tid [dev] NCCL INFO msg`, with `file:line` before the level on
warnings (`host:pid:tid [dev] transport/net_ib.cc:1295 NCCL WARN msg`, and the function
after it from 2.28: `net_ib.cc:1295 (ncclIbInit) NCCL WARN`), an optional
timestamp first, and pastes often drop everything before the level; NCCL 2.2-2.3 wrote
the level without `NCCL`. `nccl_header` finds the level with `str.find` and reads the
few tokens before it from the right, so no pattern ever scans a whole line.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainops.doctor.limits import Pattern

_ANSI = Pattern(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
_ANSI_REMNANT = Pattern(r"(?:\[[0-9;]{1,16}m\s*)+")
_KUBECTL_PREFIX = Pattern(r"\[pod/([^/\]\s]{1,253})/[^\]\s]{1,253}\] ")
_TIMESTAMP = Pattern(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d) ")
_SRUN = Pattern(r"\s{0,8}(\d{1,6}): ")
_MPIRUN = Pattern(r"\[\d{1,9},(\d{1,9})\]<(?:stdout|stderr)>: ?")
_TORCH_RANK = Pattern(r"\[rank(\d{1,9})\]: ?")
_LABEL = Pattern(r"\[([\w.|-]{1,64})\]: ?")
_QUOTE = Pattern(r"(?:>\s?)+")

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
    for _ in range(6):  # prefixes stack (kubectl --prefix, then a timestamp, then [rankN]:)
        text = result.text
        stripped = text.lstrip()
        if stripped.startswith(("[", ">")) or (stripped[:1].isdigit() and ":" in text[:16]):
            result.text = _strip_one(stripped, result)
        if result.text == text:
            break
    return result


def _strip_one(text: str, result: Clean) -> str:
    if text.startswith(">"):
        found = _QUOTE.match(text)
        return text[found.end() :] if found else text
    for pattern, field in (
        (_KUBECTL_PREFIX, "pod"),
        (_MPIRUN, "rank"),
        (_TORCH_RANK, "rank"),
        (_TIMESTAMP, None),
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
