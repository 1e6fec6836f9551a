"""Field errors worded as the API server words them (apimachinery `field.Error`).

A check yields `Problem`s: the path of the offending field and the text the
API server (or webhook) would print after the path, e.g.
`Invalid value: "llama.v2": a DNS-1035 label must consist of ...`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainops.model import ERROR

CEL, API, WEBHOOK = "cel", "api-validation", "webhook"
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    rule: str
    path: Path
    message: str
    fix: str = ""
    severity: str = ERROR


def show(value: Any) -> str:
    """A value as field errors print it: strings quoted, numbers bare, the rest as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def invalid(value: Any, detail: str) -> str:
    return f"Invalid value: {show(value)}: {detail}" if detail else f"Invalid value: {show(value)}"


def required(detail: str = "") -> str:
    return f"Required value: {detail}" if detail else "Required value"


def forbidden(detail: str) -> str:
    return f"Forbidden: {detail}"


def duplicate(value: Any, detail: str = "") -> str:
    text = f"Duplicate value: {show(value)}"
    return f"{text}: {detail}" if detail else text


def not_found(value: Any) -> str:
    return f"Not found: {show(value)}"


def not_supported(value: Any, supported: list[str] | tuple[str, ...]) -> str:
    values = ", ".join(show(v) for v in supported)
    return f"Unsupported value: {show(value)}: supported values: {values}"


def too_long(limit: int) -> str:
    return f"Too long: may not be more than {limit} bytes"
