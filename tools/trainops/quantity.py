"""Kubernetes resource quantities (`500m`, `1.5Gi`, `1e3`), parsed exactly.

Facts from k8s.io/apimachinery `pkg/api/resource/quantity.go` (ParseQuantity):
an optional sign, a decimal number, then one binary suffix (Ki..Ei), one
decimal suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent (e3, E-2).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
PARSE_ERROR = f"quantities must match the regular expression '{PATTERN}'"
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
_EXPONENT = re.compile(r"[eE][-+]?\d+")
_SUFFIXES = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse(value: Any) -> Fraction | None:
    """The exact amount, or None when the API server would not parse it."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value)) if value == value and abs(value) != float("inf") else None
    if not isinstance(value, str):
        return None
    return _parse_text(value)


@lru_cache(maxsize=4096)  # manifests repeat the same few quantities
def _parse_text(value: str) -> Fraction | None:
    number = _NUMBER.match(value)
    if number is None:
        return None
    suffix = value[number.end() :]
    if suffix in _SUFFIXES:
        scale = _SUFFIXES[suffix]
    elif _EXPONENT.fullmatch(suffix):
        exponent = int(suffix[1:])
        if abs(exponent) > 100:
            return None
        scale = Fraction(10) ** exponent
    else:
        return None
    return Fraction(number.group(0)) * scale
