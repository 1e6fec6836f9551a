"""Scalar values as go-yaml v2 resolves them, and map keys as sigs.k8s.io/yaml writes them.

Untagged plain scalars (go-yaml v2 `resolve`):
- booleans: y Y yes Yes YES true True TRUE on On ON, and n N no No NO false False
  FALSE off Off OFF;
- null: the empty scalar, ~ null Null NULL;
- floats .inf .Inf .INF (also with + or -) and .nan .NaN .NAN, which JSON cannot hold,
  so sigs.k8s.io/yaml refuses them as values;
- text starting with a digit or a sign: every `_` is removed, then Go's
  `strconv.ParseInt(s, 0, 64)` (0x1F hex, 0o17 and 0777 octal, 0b101 binary), then
  `ParseUint` for values above int64, then a float when it matches
  `[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?` (so `1e3` and `08` are floats);
- text starting with `.`: Go's `ParseFloat` as written (`.5`, `.5e3`);
- timestamps such as 2001-12-14 stay strings when decoded into an untyped value;
- anything else, sexagesimal `1:30` and `=` included, is a string.
Quoted and block scalars are strings. An explicit standard tag (`!!int "3"`) resolves
the text as a plain scalar and must agree with the tag (an int may become a float);
`!!str` keeps the text and `!!binary` decodes base64; any other tag, and the
non-specific `!`, give a string.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from typing import Any

TAG_PREFIX = "tag:yaml.org,2002:"
MERGE_TAG = TAG_PREFIX + "merge"
_STR, _BINARY, _BOOL, _INT, _FLOAT, _NULL, _TIMESTAMP = (
    TAG_PREFIX + name for name in ("str", "binary", "bool", "int", "float", "null", "timestamp")
)

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


def _table() -> dict[str, Any]:
    table: dict[str, Any] = {}
    for words, value in (
        ("y Y yes Yes YES true True TRUE on On ON", True),
        ("n N no No NO false False FALSE off Off OFF", False),
        ("~ null Null NULL", None),
        (".inf .Inf .INF +.inf +.Inf +.INF", math.inf),
        ("-.inf -.Inf -.INF", -math.inf),
        (".nan .NaN .NAN", math.nan),
    ):
        table.update(dict.fromkeys(words.split(), value))
    table[""] = None
    return table


SPECIAL: dict[str, Any] = _table()
"""Plain scalars resolved by lookup (go-yaml's resolveMap, minus `<<`, which only
means something as a key)."""

NUMERIC_START = frozenset("+-.0123456789")
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)\Z")
_INT_BASE = {"x": 16, "X": 16, "o": 8, "O": 8, "b": 2, "B": 2}
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
# Go's ParseFloat for text starting with '.': underscores only between digits.
_GO_DOT_FLOAT = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?\Z")
_TIMESTAMP_TEXT = re.compile(
    r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"(?:[Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2})?)?\Z"
)


class ScalarError(ValueError):
    """A scalar the cluster's decoder refuses; the message is for the user."""


def resolve_plain(text: str) -> Any:
    """The value of an untagged plain scalar."""
    value = SPECIAL.get(text, text)
    if value is not text or text[:1] not in NUMERIC_START:
        return value
    return _number(text)


def _number(text: str) -> Any:
    if text[0] == ".":
        if _GO_DOT_FLOAT.match(text):
            number = float(text.replace("_", ""))
            if not math.isinf(number):  # Go reports a range error and keeps the string
                return number
        return text
    plain = text.replace("_", "")
    match = _GO_INT.match(plain)
    # More digits than any 64-bit integer has (0b + 64 bits at most): out of range, and
    # never handed to int(), which refuses strings past 4300 digits.
    if match and len(match.group(2)) <= 70:
        sign, digits = match.groups()
        if digits[1:2] in _INT_BASE:
            value = int(digits[2:], _INT_BASE[digits[1]])
        else:
            value = int(digits, 8 if digits[0] == "0" else 10)
        value = -value if sign == "-" else value
        if _INT64_MIN <= value <= _INT64_MAX or (not sign and value <= _UINT64_MAX):
            return value
    if _YAML_FLOAT.match(plain):
        number = float(plain)
        if not math.isinf(number):
            return number
    return text


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(TAG_PREFIX) if tag.startswith(TAG_PREFIX) else tag


def _tag_of(value: Any) -> str:
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _FLOAT
    return _STR


def resolve_tagged(tag: str, text: str) -> Any:
    """The value of a scalar with an explicit tag (the non-specific `!` included)."""
    if tag == _STR:
        return text
    if tag == _BINARY:
        try:
            data = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
        except (binascii.Error, ValueError):
            raise ScalarError("!!binary value contains invalid base64 data") from None
        return data.decode("utf-8", "replace")
    if tag not in (_BOOL, _INT, _FLOAT, _NULL, _TIMESTAMP):
        return text  # go-yaml keeps the text of scalars with tags it does not resolve
    if tag == _TIMESTAMP and _TIMESTAMP_TEXT.match(text):
        return text  # decoded into an untyped value, a timestamp stays a string
    value = resolve_plain(text)
    found = _tag_of(value)
    if found == tag:
        return value
    if tag == _FLOAT and found == _INT:
        return float(value)
    raise ScalarError(f"cannot decode {_short_tag(found)} `{text}` as a {_short_tag(tag)}")


def json_value_problem(value: float) -> str | None:
    """Why sigs.k8s.io/yaml cannot turn a float into JSON, or None when it can."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return None


def key_string(key: Any) -> str:
    """A resolved map key as the JSON key sigs.k8s.io/yaml makes of it."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int) and _INT64_MIN <= key <= _INT64_MAX:
        return str(key)
    if isinstance(key, float):
        return _go_float32_g(key)
    kind = "<nil>" if key is None else "uint64" if isinstance(key, int) else type(key).__name__
    raise ScalarError(f"unsupported map key of type {kind}: JSON object keys must be strings")


def _go_float32_g(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 32), with YAML's names for inf and NaN."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    single = struct.unpack("f", struct.pack("f", value))[0]
    if single == 0:
        return "-0" if math.copysign(1, single) < 0 else "0"
    for precision in range(1, 10):  # the shortest digits that give back the same float32
        text = f"{single:.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            break
    mantissa, exponent_text = text.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exponent = int(exponent_text)
    if exponent < -4 or exponent >= 6:  # shortest formatting decides with precision 6
        fraction = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{fraction}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole, fraction = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
    return f"{sign}{whole}.{fraction}" if fraction else f"{sign}{whole}"
