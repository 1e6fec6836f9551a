"""The message catalog: what NCCL, aws-ofi-nccl, torch.distributed, CUDA and the GPU driver
print, read from their sources, each message with its meaning, fix and the finding it raises.

One YAML file per component beside this module:
- `nccl.yaml`, `aws-ofi-nccl.yaml`: every WARN and user-facing INFO format of NCCL 2.18 on
  and aws-ofi-nccl 1.14 on (`scripts/extract-doctor-messages.py` refreshes formats and
  sources from a clone);
- `nccl-result.yaml`: NCCL's result strings (ncclGetErrorString), which the callers of a
  failed NCCL call print (torch, nccl-tests, Horovod);
- `libfabric.yaml`: the EFA provider's errors that say why the fabric cannot be used;
- `ucx.yaml`: UCX's errors on locked memory, shared memory, transport selection, its
  settings and lost peers;
- `torch.yaml`: the error and warning strings of torch.distributed and torch.cuda of the
  pinned torch (with the earlier wordings users of older releases paste);
- `openmpi.yaml`: Open MPI's mpirun help messages that say why no rank started, and its TCP
  BTL's and BML's messages on peers it cannot reach or lost;
- `gloo.yaml`: Gloo's tcp transport errors that torch.yaml does not carry (peers lost,
  connects failed, interfaces not found);
- `horovod.yaml`: Horovod's stall inspector, its coordinator's mismatch errors, its shutdown
  status and horovodrun's launch failures;
- `accelerate.yaml`: Hugging Face Accelerate's refusals to prepare a model placed for one
  process under a multi-process launch;
- `cuda.yaml`: the CUDA runtime and driver error names and their strings;
- `xid.yaml`: NVIDIA's Xid table;
- `errno.yaml`: the C library's error texts that name a cause wherever another component's
  message carries them (`errno_in`);
- `families.yaml`: the findings the catalog raises that no check of the doctor declares.

`lookup(text)` finds the entry a message was printed from. Each printf format becomes a
pattern, indexed by its anchor: of the pairs of adjacent words the format always prints,
the one fewest other formats print. A line costs two dictionary probes per word, not one
pattern per entry; the few formats found are tried in order of how much fixed text they
carry, at most `MAX_TRIES` of them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainops.doctor.limits import Pattern, words
from trainops.doctor.limits import literal as exactly
from trainops.rules import DOCTOR, RuleInfo, register

HERE = Path(__file__).parent
COMPONENTS = (
    "nccl",
    "aws-ofi-nccl",
    "nccl-result",
    "libfabric",
    "ucx",
    "torch",
    "openmpi",
    "gloo",
    "horovod",
    "accelerate",
    "cuda",
    "xid",
    "errno",
)
SEVERITIES = ("error", "warning", "info", "benign", "evidence")
# Severities that raise a finding; `benign` (healthy systems print it) and `evidence`
# (version, transport, values read from the environment) never do.
REPORTED = ("error", "warning", "info")
MAX_WORDS = 128  # words of a line probed for an anchor
ANCHOR_WORDS = 32  # a format's anchor is among its first words
SENTENCE = 40  # a message longer than twice this is matched on its first sentence
CUT = 40  # characters of a message's opening that name it on a line cut short after them
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
    # What older releases printed for it: CUDA's strings; other components' earlier wordings
    # of the message (printf formats), sourced by `former_source` at the release that
    # printed them.
    former: tuple[str, ...] = ()
    former_source: str = ""
    kind: str = ""  # runtime | driver | nvml (CUDA)
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


def compile_format(fmt: str, within: str = "") -> tuple[Pattern, list[tuple[str, ...]], int]:
    """A printf format -> (pattern, the word pairs it always prints, characters of fixed text);
    `within` is a pattern the line must show before the message."""
    first_line = fmt.strip().split("\n", 1)[0]
    if len(_CONVERSION.sub("", first_line).strip()) >= 12:
        # NCCL prints a message with newlines as several log lines, the later ones without
        # its header: the first line is the message as a reader finds it.
        fmt = first_line
    fmt = " ".join(fmt.split())  # a run of whitespace matches any run (see below)
    # A long message is matched on its first sentence: pastes and collectors cut and wrap
    # long lines, and the first sentence is what names the message.
    stop = fmt.find(". ", SENTENCE)
    if len(fmt) > 2 * SENTENCE and stop > 0:
        fmt = fmt[: stop + 1]
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
    opening = _cut_opening(fmt)
    if opening:
        pattern = f"(?:{_either_case_first(pattern)}|{opening[0]})"
    fixed = sum(len(literal.strip()) for literal, _, _ in pieces)
    anchors = []
    for literal, glued_left, glued_right in pieces:
        words = _literal_words(literal, glued_left, glued_right)
        anchors += [tuple(words[i : i + 2]) for i in range(len(words))]
    # Only early pairs: a line is probed on its first MAX_WORDS words, and collection may put
    # a few words in front of the message; a line cut inside the opening holds only its pairs.
    anchors = [a for a in anchors[:ANCHOR_WORDS] if sum(map(len, a)) >= 6]
    if opening:
        anchors = [a for a in anchors if a in opening[1]] or anchors
    return Pattern(within + pattern), anchors, fixed


def _either_case_first(pattern: str) -> str:
    """A paste that begins with a long message may lower-case its first letter (a title, a
    sentence quoting it); a short one ("Failed to open %s") would then match prose."""
    if pattern[:1].isalpha():
        return f"[{pattern[0].upper()}{pattern[0].lower()}]{pattern[1:]}"
    return pattern


def _cut_opening(fmt: str) -> tuple[str, set[tuple[str, ...]]] | None:
    """For a message whose fixed opening is at least CUT characters long and is not the
    whole message: the pattern of a line that ends inside that opening after CUT characters
    of it (a paste or a title cut short: "timed out initializing process group in store
    based barrier on rank"), and the word pairs such a line always shows."""
    first = _CONVERSION.search(fmt)
    words = fmt[: first.start()].split() if first else []
    if len(" ".join(words)) < CUT:
        return None
    count = next(n for n in range(1, len(words) + 1) if len(" ".join(words[:n])) >= CUT)
    shown = r"\s+".join(exactly(word) for word in words[:count])
    rest = "".join(rf"(?:\s+{exactly(word)}" for word in words[count:])
    pattern = _either_case_first(shown) + rest + ")?" * (len(words) - count) + r"[\s:,.'\"`]*$"
    return pattern, {tuple(words[i : i + 2]) for i in range(count - 1)}


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
            former=tuple(row.get("former") or ()),
            former_source=row.get("former_source", "") or "",
            kind=row.get("kind", "") or "",
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
    cuda: dict[str, Entry]  # CUDA errors by name and by their string, lower case


# CUDA's error strings are plain English ("invalid argument", "out of memory"): they name a
# CUDA error only on a line that says CUDA (or NCCL, which prints them) before them, and only
# where a caller prints them, after a colon, quote, '=' or '(' ("CUDA error: %s", NCCL's
# "Cuda failure '%s'", THC's "error=2 : %s"): a sentence such as "I get CUDA out of memory"
# names no error.
_CUDA_CONTEXT = r"(?i:cuda|nccl|cu[a-z]+\(|torch).{0,300}?[:'\"=(]\s*"
# NVML's strings ("Driver/library version mismatch") follow what printed them: nvidia-smi's
# "Failed to initialize NVML: %s", NCCL's and torch's NVML calls.
_NVML_CONTEXT = r"(?i:nvml|nvidia-smi|cuda|nccl|torch).{0,300}?"
# NCCL's result strings ("internal error", "unhandled system error") are plain English too:
# they name NCCL's result after what printed them ("NCCL error in:", "Test NCCL failure").
_NCCL_CONTEXT = r"(?i:nccl).{0,300}?"


def formats_of(entry: Entry) -> list[tuple[str, str]]:
    """(format, what must precede it): the format; for a CUDA error its name and its string."""
    if entry.component == "cuda":
        shown = [(entry.key, "")]
        for text in filter(None, (entry.text, *entry.former)):
            # A string that itself begins with CUDA needs nothing before it.
            within = _NVML_CONTEXT if entry.kind == "nvml" else _CUDA_CONTEXT
            within = "" if text.lower().startswith("cuda") else within
            shown.append((text.replace("%", "%%"), within))
        return shown
    within = _NCCL_CONTEXT if entry.component == "nccl-result" else ""
    return [(fmt, within) for fmt in (entry.key, *entry.former)]


def _as_printed_by(entry: Entry, fmt: str) -> Entry:
    """The entry a line in one of its earlier wordings stands for: sourced where that
    wording was printed."""
    if fmt in entry.former and entry.former_source:
        return dataclasses.replace(entry, source=entry.former_source)
    return entry


@functools.cache
def index() -> Index:
    """Each format under its rarest anchor, so that few formats share a bucket."""
    compiled: list[tuple[Entry, Pattern, list[tuple[str, ...]], int]] = []
    xids: dict[int, Entry] = {}
    cuda: dict[str, Entry] = {}
    frequency: dict[tuple[str, ...], int] = {}
    for entry in entries():
        if entry.component in ("xid", "errno"):
            if entry.component == "xid":
                xids[int(entry.key)] = entry
            continue
        if entry.component == "cuda":
            cuda.setdefault(entry.key.lower(), entry)
            cuda.setdefault(entry.text.lower(), entry)
            for text in entry.former:
                cuda.setdefault(text.lower(), entry)
        for fmt, within in formats_of(entry):
            pattern, anchors, fixed = compile_format(fmt, within)
            compiled.append((_as_printed_by(entry, fmt), pattern, anchors, fixed))
            for anchor in set(anchors):
                frequency[anchor] = frequency.get(anchor, 0) + 1
    by_anchor: dict[tuple[str, ...], list[_Matcher]] = {}
    anchored: set[Entry] = set()
    for entry, pattern, anchors, fixed in compiled:
        if not anchors:
            continue
        anchor = min(anchors, key=lambda a: (frequency[a], -sum(map(len, a))))
        by_anchor.setdefault(anchor, []).append(_Matcher(entry, pattern, fixed))
        anchored.add(entry)
    for matchers in by_anchor.values():
        matchers.sort(key=lambda m: -m.fixed)
    unanchored = [e for e in entries() if e.component not in ("xid", "errno") and e not in anchored]
    return Index(by_anchor, unanchored, xids, cuda)


def cuda_error(text: str) -> Entry | None:
    """The CUDA error a name (`cudaErrorNoKernelImageForDevice`) or string stands for."""
    return index().cuda.get(text.strip().strip("'\".").lower())


@functools.cache
def _errno_texts() -> tuple[Pattern, dict[str, Entry]]:
    chosen = {e.key: e for e in entries() if e.component == "errno"}
    longest_first = sorted(chosen, key=len, reverse=True)
    return words(*longest_first), chosen


def errno_in(text: str) -> Entry | None:
    """The C library error text inside a message (`... accept failed: Too many open files`)."""
    pattern, chosen = _errno_texts()
    found = pattern.search(text)
    return chosen[found.group(0)] if found else None


def xid(code: int) -> Entry | None:
    """NVIDIA's entry for an Xid code."""
    return index().xids.get(code)


_PUNCTUATION = "'\"`‘’“”(),;"


def lookup(text: str) -> Entry | None:
    """The catalogued message `text` (a line without collection prefixes) was printed from:
    of the formats whose anchor the line holds, the one with the most fixed text that
    matches."""
    text = text[:MAX_TEXT]
    words = text.split(None, MAX_WORDS)[:MAX_WORDS]
    table = index().by_anchor
    candidates: dict[int, _Matcher] = {}
    for position, word in enumerate(words):
        pair = (word, words[position + 1]) if position + 1 < len(words) else None
        # A message its caller quotes or lists ('internal error', "..., internal error, NCCL
        # version") glues the quote or the comma to its words.
        anchors = [pair, (word,)]
        bare = word.strip(_PUNCTUATION)
        after = pair[1].strip(_PUNCTUATION) if pair else ""
        if bare != word or (pair and after != pair[1]):
            anchors += [(bare, after) if pair else None, (bare,)]
        for anchor in anchors:
            for matcher in table.get(anchor, ()) if anchor else ():
                candidates[id(matcher)] = matcher
    ranked = sorted(candidates.values(), key=lambda m: -m.fixed)
    for matcher in ranked[:MAX_TRIES]:
        if matcher.pattern.search(text):
            return matcher.entry
    return None
