"""One YAML document as the cluster reads it, at ryaml's speed when that is provably the same.

`reader` builds every document from libyaml's events with go-yaml v2's rules; it is the
reference, and about three times slower than ryaml (serde_yaml over unsafe-libyaml, a
transpile of the same libyaml that go-yaml ports, so both accept the same syntax).
ryaml differs only in how it resolves plain scalars (YAML 1.2) and in what it does with
anchors, tags, merge keys, duplicate keys and non-string keys. Its result is therefore
used only when none of those can matter:
- the text has no `&` (no anchors, so no aliases), no `!` (no tags) and no flow
  brackets nested deeper than serde_yaml's limit;
- ryaml accepted the document (it refuses duplicate keys and nesting past 128);
- every key is a string that go-yaml would also read as that string, and `<<` is none;
- no string is one that ryaml keeps as a string when written plain but go-yaml reads
  as something else (`yes`, `on`, `0777`, `1_000`, ...): it may have been plain;
- no float is infinite or NaN and no integer is beyond 64 bits.
A non-string value ryaml resolved is one go-yaml resolves the same way
(tests/test_yaml_cluster.py checks every form). Anything else goes to `reader`.
"""

from __future__ import annotations

import re
from typing import Any

import ryaml

from trainops.kubeyaml.reader import REFUSE, RepeatedKey, load_first_document
from trainops.kubeyaml.scalars import NUMERIC_START, SPECIAL, resolve_plain

_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
_GO_ONLY_WORDS = frozenset(
    word for word, value in SPECIAL.items() if value is True or value is False
) - {"true", "True", "TRUE", "false", "False", "FALSE"}
_RISKY_FIRST = frozenset(word[0] for word in _GO_ONLY_WORDS) | NUMERIC_START | {"<"}


def load_document(
    text: str, duplicates: str = REFUSE, repeated: list[RepeatedKey] | None = None
) -> Any:
    """The first document of `text`, decoded as sigs.k8s.io/yaml decodes it (`repeated`:
    see load_first_document; ryaml refuses repeated keys, so they always reach the reader)."""
    if "&" not in text and "!" not in text and _flow_depth_within(text, _RYAML_DEPTH):
        try:
            obj = ryaml.loads(text)
        except Exception:  # ryaml raises its own error type; the reader explains it
            obj = _UNSURE
        if obj is not _UNSURE and _same_for_the_cluster(obj):
            return obj
    return load_first_document(text, duplicates, repeated)


_UNSURE = object()
_RYAML_DEPTH = 128  # serde_yaml's recursion limit
_BRACKETS = re.compile(r"[\[\]{}]")


def _flow_depth_within(text: str, limit: int) -> bool:
    """False when flow brackets may nest deeper than `limit` (quoted ones count too).

    serde_yaml refuses such documents anyway, after time that grows with the square of
    the depth (minutes at 100,000), where libyaml's events take milliseconds.
    """
    if text.count("[") + text.count("{") <= limit:
        return True
    depth = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return False
        elif depth:
            depth -= 1
    return True


def _differs_when_plain(text: str) -> bool:
    """Whether ryaml's string `text` may have been a plain scalar go-yaml reads otherwise.

    ryaml resolves a plain `1` to an int, so its string "1" was quoted: only texts that
    ryaml keeps as strings when plain and go-yaml does not can differ.
    """
    if text in _GO_ONLY_WORDS or text == "<<":
        return True
    if text[:1] not in NUMERIC_START or resolve_plain(text).__class__ is str:
        return False
    return _ryaml_keeps_string(text)


def _ryaml_keeps_string(text: str) -> bool:
    try:
        return ryaml.loads(text).__class__ is str
    except Exception:  # ryaml refuses some numbers (beyond 64 bits): unsure, so differs
        return True


_VERDICTS: dict[str, bool] = {}  # _differs_when_plain of strings seen, bounded
_MAX_VERDICTS = 20_000


def _verdict(text: str) -> bool:
    differs = _differs_when_plain(text)
    if len(_VERDICTS) < _MAX_VERDICTS:
        _VERDICTS[text] = differs
    return differs


def _same_for_the_cluster(obj: Any) -> bool:
    first, verdicts = _RISKY_FIRST, _VERDICTS
    pending = [obj]
    while pending:
        item = pending.pop()
        if item.__class__ is dict:
            for key in item:
                if key.__class__ is not str:
                    return False
                if key[:1] in first:
                    differs = verdicts.get(key)
                    if differs or (differs is None and _verdict(key)):
                        return False
            values: Any = item.values()
        elif item.__class__ is list:
            values = item
        else:
            values = (item,)
        for value in values:
            cls = value.__class__
            if cls is str:
                if value[:1] in first:
                    differs = verdicts.get(value)
                    if differs or (differs is None and _verdict(value)):
                        return False
            elif cls is dict or cls is list:
                pending.append(value)
            elif cls is float:
                if value - value != 0:  # inf or NaN
                    return False
            elif cls is int and not _INT64_MIN <= value <= _UINT64_MAX:
                return False
    return True
