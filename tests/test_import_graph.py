"""The import graph of the toolkit, the policy pack and the trainer, read from the source
(no import runs): no file imports itself through others, and no package outside the one
known cycle joins a cycle of packages (issue 40 item 5 breaks that one). Imports under
`if TYPE_CHECKING:` are for annotations only and do not count; imports inside functions
(lazy ones) do, since they run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {
    "trainops": REPO / "tools" / "trainops",
    "policies": REPO / "policies",
    "trainer": REPO / "trainer" / "src" / "trainer",
}
# The packages of tools/trainops that import each other today (through lazy imports):
# item 5 of issue 40 makes validate's stages peers and empties this.
KNOWN_PACKAGE_CYCLE = frozenset(
    {
        "trainops.admission",
        "trainops.appsets",
        "trainops.config",
        "trainops.policy",
        "trainops.profile",
        "trainops.render",
        "trainops.schema",
    }
)


def _modules() -> dict[str, Path]:
    found = {}
    for top, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import but those under `if TYPE_CHECKING:`."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for child in node.body for inner in ast.walk(child)}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped
    ]


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if path.name != "__init__.py":
            package.pop()
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    # `from pkg import mod` needs pkg.mod; `from pkg import name` needs pkg's __init__.
    return [f"{base}.{alias.name}" for alias in node.names]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, set())
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(module, path, node):
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _package(module: str) -> str:
    """The package a module belongs to: trainops.<subpackage>; the flat policy pack and the
    trainer are one package each."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "trainops" else parts[0]


def test_no_file_imports_itself_through_others():
    cycles = _cycles(_graph())
    assert not cycles, [sorted(c) for c in cycles]


def test_no_package_joins_a_cycle_beyond_the_known_one():
    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        for target in targets:
            source, into = _package(module), _package(target)
            if into != source:
                packages.setdefault(source, set()).add(into)
    in_cycles = set().union(*_cycles(packages)) if _cycles(packages) else set()
    assert in_cycles <= KNOWN_PACKAGE_CYCLE, sorted(in_cycles - KNOWN_PACKAGE_CYCLE)


@pytest.mark.parametrize(
    "edges, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [{"a", "b", "c"}]),
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [{"a", "b"}, {"c", "d"}]),
    ],
)
def test_the_cycle_finder_finds_exactly_the_cycles(edges, expected):
    assert sorted(map(sorted, _cycles(edges))) == sorted(map(sorted, expected))


def test_an_import_for_annotations_only_is_not_an_edge():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nimport os\nif TYPE_CHECKING:\n    import json\n"
        "def f():\n    import re\n"
    )
    names = sorted(a.name for node in _runtime_imports(tree) for a in node.names)
    assert names == ["TYPE_CHECKING", "os", "re"]
