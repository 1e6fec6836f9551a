"""One line of printable text from any value the input carries: what every reporter (and
the doctor's report) does to keys, values and paths before printing them."""

from __future__ import annotations

import re

# C0 and C1 controls but the tab, the Unicode line and paragraph separators, lone
# surrogates and the two non-characters XML 1.0 refuses; and the format characters that
# reorder or hide text (bidirectional marks, embeddings, overrides and isolates; zero-width
# spaces and joiners, the word joiner and invisible operators, the BOM), with which a
# value can read as something else (CVE-2021-42574).
_CONTROL = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u2069\ud800-\udfff\ufeff\ufffe\uffff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """`text` on one line with every control character spelled as an escape (`\\n`,
    `\\x1b`). Keys, values and paths of the input reach the reports: a raw newline would
    let a manifest forge lines (a CI runner reads `::error` on any line of the log), an
    escape sequence would drive the terminal, and XML refuses most controls outright."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
