"""The message catalog: what NCCL, aws-ofi-nccl, torch.distributed, CUDA and the GPU driver
print, read from their sources, each message with its meaning, fix and the finding it raises.

One YAML file per component beside this module:
- `nccl.yaml`, `aws-ofi-nccl.yaml`: every WARN and user-facing INFO format of NCCL 2.18 on and
  aws-ofi-nccl 1.14 on (`scripts/extract-doctor-messages.py` refreshes formats and sources from a clone);
- `torch.yaml`: the error and warning strings of torch.distributed and torch.cuda of the
  pinned torch;
- `cuda.yaml`: the CUDA runtime and driver error names and their strings;
- `xid.yaml`: NVIDIA's Xid table;
- `families.yaml`: the findings the catalog raises that no check of the doctor declares.

`lookup(text)` finds the entry a message was printed from. Each printf format becomes a
pattern, indexed by its anchor: the longest pair of adjacent words the format always prints.
A line costs one dictionary probe per word, not one pattern per entry; the few entries that
share an anchor are then tried in order of how much fixed text they carry.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainops.doctor.limits import Pattern
from trainops.doctor.limits import literal as exactly
from trainops.rules import DOCTOR, RuleInfo, register

HERE = Path(__file__).parent
COMPONENTS = ("nccl", "aws-ofi-nccl", "torch", "cuda", "xid")
SEVERITIES = ("error", "warning", "info", "benign", "evidence")
# Severities that raise a finding; `benign` (healthy systems print it) and `evidence`
# (version, transport, values read from the environment) never do.
REPORTED = ("error", "warning", "info")
MAX_WORDS = 96  # words of a line probed for an anchor
MAX_TEXT = 2000  # characters of a line a pattern may scan
MAX_TRIES = 12  # patterns tried on one line

_CONVERSION = Pattern(
    r"%(?P<flags>[-+ #0']*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?"
    r"(?P<length>hh|h|ll|l|z|j|t|L|q)?(?P<kind>[diouxXeEfgGaAcspn%])"
)
_VALUE = {
    "d": r"-?\d+",
    "i": r"-?\d+",
    "u": r"\d+",
    "o": r"[0-7]+",
    "x": r"(?:0x)?[0-9a-fA-F]+",
    "X": r"(?:0x)?[0-9a-fA-F]+",
    "e": r"[-+]?[\d.]+(?:e[-+]?\d+)?|[-+]?(?:inf|nan)",
    "f": r"[-+]?[\d.]+(?:e[-+]?\d+)?|[-+]?(?:inf|nan)",
    "g": r"[-+]?[\d.]+(?:e[-+]?\d+)?|[-+]?(?:inf|nan)",
    "a": r"\S+",
    "c": r".",
    "p": r"\S+",
    "n": r"",
}


@dataclass(frozen=True)
class Entry:
    """One message as its component prints it."""

    component: str
    key: str  # the printf format (NCCL, aws-ofi-nccl, torch), the error name (CUDA), the Xid
    level: str  # WARN | INFO for NCCL and its plugin; ERROR for the others
    source: str  # pinned URL of the line (or document) that prints it
    finding: str
    severity: str
    meaning: str
    fix: str = ""
    text: str = ""  # the string the error name prints as (CUDA)
    first: str = ""  # first release that prints it (NCCL, aws-ofi-nccl)
    last: str = ""  # newest release that prints it

    @property
    def reported(self) -> bool:
        return self.severity in REPORTED


@dataclass(frozen=True)
class Family:
    id: str
    severity: str
    title: str
    why: str
    fix: str


def _literal_words(literal: str, glued_left: bool, glued_right: bool) -> list[str]:
    """The words of a fixed part that the line shows whole (not fused with a value)."""
    words = literal.split()
    if glued_left and words and not literal[:1].isspace():
        words = words[1:]
    if glued_right and words and not literal[-1:].isspace():
        words = words[:-1]
    return words


def compile_format(fmt: str) -> tuple[Pattern, tuple[str, ...] | None, int]:
    """A printf format -> (pattern, anchor words or None, characters of fixed text)."""
    fmt = fmt.strip()
    parts: list[tuple[bool, str]] = []  # (is a value, pattern)
    pieces: list[tuple[str, bool, bool]] = []  # fixed text, glued to a value left / right
    position = 0
    for found in _CONVERSION.finditer(fmt):
        literal = fmt[position : found.start()]
        kind = found.group("kind")
        if kind == "%":
            literal += "%"
        parts.append((False, exactly(literal)))
        pieces.append((literal, position > 0, kind != "%"))
        if kind == "s":
            parts.append((True, r".{0,512}?"))
        elif kind != "%":
            parts.append((True, f"(?:{_VALUE[kind]})"))
        position = found.end()
    tail = fmt[position:]
    parts.append((False, exactly(tail)))
    pieces.append((tail, position > 0, False))
    parts = [p for p in parts if p[1]]
    # A value at either end adds nothing a search would not find without it, and a leading
    # one would make the search try a wide lazy group at every position of the line.
    while len(parts) > 1 and parts[0][0]:
        parts.pop(0)
    while len(parts) > 1 and parts[-1][0]:
        parts.pop()
    # Whitespace in a format matches any run of whitespace: pastes re-wrap and re-indent.
    pattern = "".join(p for _, p in parts).replace(r"\ ", r"\s+").replace("\\\n", r"\s+")
    fixed = sum(len(literal.strip()) for literal, _, _ in pieces)
    best: tuple[str, ...] | None = None
    for literal, glued_left, glued_right in pieces:
        words = _literal_words(literal, glued_left, glued_right)
        for index in range(len(words)):
            candidate = tuple(words[index : index + 2])
            if best is None or sum(map(len, candidate)) > sum(map(len, best)):
                best = candidate
    if best is not None and sum(map(len, best)) < 6:
        best = None
    return Pattern(pattern), best, fixed


def _entries_of(component: str, rows: list[dict]) -> Iterable[Entry]:
    for row in rows:
        yield Entry(
            component=component,
            key=str(row["key"]),
            level=row.get("level", "ERROR"),
            source=row["source"],
            finding=row["finding"],
            severity=row["severity"],
            meaning=row.get("meaning", ""),
            fix=row.get("fix", "") or "",
            text=row.get("text", "") or "",
            first=row.get("first", ""),
            last=row.get("last", ""),
        )


def _load(name: str):
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(HERE / f"{name}.yaml", encoding="utf-8") as handle:
        return yaml.load(handle, Loader=loader) or []


@functools.cache
def entries() -> tuple[Entry, ...]:
    found: list[Entry] = []
    for component in COMPONENTS:
        found += _entries_of(component, _load(component))
    return tuple(found)


@functools.cache
def families() -> dict[str, Family]:
    return {row["id"]: Family(**row) for row in _load("families")}


def register_families() -> list[RuleInfo]:
    """Put the catalog's own findings into the rule catalog (once)."""
    return [
        register(RuleInfo(f.id, f.severity, f.title, f.why, f.fix, category=DOCTOR))
        for f in families().values()
    ]


@dataclass(frozen=True)
class _Matcher:
    entry: Entry
    pattern: Pattern
    fixed: int


@dataclass
class Index:
    by_anchor: dict[tuple[str, ...], list[_Matcher]]
    unanchored: list[Entry]  # formats with too little fixed text to be told apart
    xids: dict[int, Entry]


def formats_of(entry: Entry) -> list[str]:
    """What the line shows: the format; for a CUDA error its name and its string."""
    if entry.component == "cuda":
        return [entry.key] + ([entry.text.replace("%", "%%")] if entry.text else [])
    return [entry.key]


@functools.cache
def index() -> Index:
    by_anchor: dict[tuple[str, ...], list[_Matcher]] = {}
    unanchored: list[Entry] = []
    xids: dict[int, Entry] = {}
    for entry in entries():
        if entry.component == "xid":
            xids[int(entry.key)] = entry
            continue
        anchored = False
        for fmt in formats_of(entry):
            pattern, anchor, fixed = compile_format(fmt)
            if anchor is None and entry.component == "cuda" and len(fmt) >= 6:
                anchor = (fmt,)  # an error name is one word
            if anchor is not None:
                by_anchor.setdefault(anchor, []).append(_Matcher(entry, pattern, fixed))
                anchored = True
        if not anchored:
            unanchored.append(entry)
    for matchers in by_anchor.values():
        matchers.sort(key=lambda m: -m.fixed)
    return Index(by_anchor, unanchored, xids)


def xid(code: int) -> Entry | None:
    """NVIDIA's entry for an Xid code."""
    return index().xids.get(code)


def lookup(text: str) -> Entry | None:
    """The catalogued message `text` (a line without collection prefixes) was printed from."""
    text = text[:MAX_TEXT]
    words = text.split(None, MAX_WORDS)[:MAX_WORDS]
    table = index().by_anchor
    best: _Matcher | None = None
    tried: set[tuple[str, ...]] = set()
    budget = MAX_TRIES
    for position, word in enumerate(words):
        pair = (word, words[position + 1]) if position + 1 < len(words) else None
        for anchor in (pair, (word,)):
            if anchor is None or anchor in tried or anchor not in table:
                continue
            tried.add(anchor)
            for matcher in table[anchor]:
                if budget == 0 or (best is not None and matcher.fixed <= best.fixed):
                    break
                budget -= 1
                if matcher.pattern.search(text):
                    best = matcher
                    break
    return best.entry if best else None
