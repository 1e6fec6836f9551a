"""Reporters: turn a validation Report into text, JSON, JUnit XML, SARIF or GitHub
workflow annotations (each in its module; `escape` makes what they print one line)."""

from __future__ import annotations

from collections.abc import Callable

from trainops.report import Report

FORMATS = ("text", "json", "junit", "sarif", "github")


def reporter(name: str) -> Callable[[Report], str]:
    if name == "text":
        from trainops.output.text import render
    elif name == "json":
        from trainops.output.json import render
    elif name == "junit":
        from trainops.output.junit import render
    elif name == "sarif":
        from trainops.output.sarif import render
    elif name == "github":
        from trainops.output.github import render
    else:
        raise ValueError(f"unknown format {name}")
    return render
