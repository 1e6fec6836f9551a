"""Fixtures of the catalog's rules, one module per area of the pack (policies/<area>.py):
each module declares FIXTURES (rule id -> (failing render, passing render)) and may declare
MORE (rule id -> further pairs). A rule's FIXTURES pair is declared once; its further pairs
may come from several modules (the area that extended what the rule checks), and are
joined. tests/policies/catalog_fixtures.py merges them, so every test that reads the
catalog's fixtures sees these too."""

from __future__ import annotations

import importlib
import pkgutil

FIXTURES: dict = {}
MORE: dict = {}

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    _own = getattr(_module, "FIXTURES", {})
    _twice = sorted(FIXTURES.keys() & _own.keys())
    if _twice:
        raise AssertionError(f"{_info.name}: FIXTURES already declares {', '.join(_twice)}")
    FIXTURES.update(_own)
    for _rule, _pairs in getattr(_module, "MORE", {}).items():
        MORE.setdefault(_rule, []).extend(_pairs)
