"""Fixtures of the catalog's rules, one module per area of the pack (policies/<area>.py):
each module declares FIXTURES (rule id -> (failing render, passing render)) and may declare
MORE (rule id -> further pairs). tests/policies/catalog_fixtures.py merges them, so every
test that reads the catalog's fixtures sees these too."""

from __future__ import annotations

import importlib
import pkgutil

FIXTURES: dict = {}
MORE: dict = {}

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name, _merged in (("FIXTURES", FIXTURES), ("MORE", MORE)):
        _own = getattr(_module, _name, {})
        _twice = sorted(_merged.keys() & _own.keys())
        if _twice:
            raise AssertionError(f"{_info.name}: {_name} already declares {', '.join(_twice)}")
        _merged.update(_own)
