"""Lookups over one render, built once, so that every rule's lookup is constant time.

Rules never scan the render. The engine builds a `RenderIndex` once per render
(the target's documents plus its cluster's platform documents, each object once)
and rules ask it for documents by kind, by kind and name, by namespace, for the
CustomResourceDefinition of a group and kind, or for pod templates selected by
labels. Each lookup returns documents in render order, the order the rules saw
before the index existed, so "the first match" means the same thing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from trainops.model import Document, computed_once

CRD = "CustomResourceDefinition"


class RenderIndex:
    """Documents of a render keyed every way rules look them up."""

    def __init__(
        self,
        documents: Iterable[Document],
        platform: Iterable[Document] = (),
        platform_wins: bool = False,
    ):
        self.documents = list(documents)  # the target's own: what the engine checks
        self.everything = self.documents
        platform = list(platform)
        if platform_wins:
            # A run cannot change the cluster's objects (its project syncs only jobs), so
            # lookups see the platform's policy, parameters and namespaces, never a run's
            # object of the same kind and name.
            theirs = {doc.resource_id for doc in platform}
            self.everything = platform + [d for d in self.documents if d.resource_id not in theirs]
        elif platform:
            own = {doc.resource_id for doc in self.documents}
            self.everything = self.documents + [d for d in platform if d.resource_id not in own]
        self._by_kind: dict[str, list[Document]] = defaultdict(list)
        self._by_name: dict[tuple[str, str], list[Document]] = defaultdict(list)
        for doc in self.everything:
            self._by_kind[doc.kind].append(doc)
            self._by_name[(doc.kind, doc.name)].append(doc)
        self._crds: dict[tuple[str, str], Document] = {}
        for doc in self.documents:
            if doc.kind == CRD:
                spec = doc.obj.get("spec")
                spec = spec if isinstance(spec, dict) else {}
                names = spec.get("names")
                kind = names.get("kind") if isinstance(names, dict) else None
                group = spec.get("group")
                if isinstance(group, str) and isinstance(kind, str):
                    self._crds.setdefault((group, kind), doc)
        self.kinds = frozenset(self._by_kind)
        self._of_kinds: dict[tuple[str, ...], list[Document]] = {}
        self._memo: dict[Any, Any] = {}

    def of_kind(self, *kinds: str) -> list[Document]:
        """Documents of these kinds, in render order."""
        found = self._of_kinds.get(kinds)
        if found is None:
            if len(kinds) == 1:
                found = self._by_kind.get(kinds[0], [])
            else:
                merged = [
                    doc for kind in dict.fromkeys(kinds) for doc in self._by_kind.get(kind, [])
                ]
                position = self._position
                found = sorted(merged, key=lambda doc: position[id(doc)])
            self._of_kinds[kinds] = found
        return found

    def find(self, kind: str, name: str, namespace: str | None = None) -> Document | None:
        """The first `kind` named `name`; with a namespace, one in it or cluster-scoped."""
        for doc in self._by_name.get((kind, name), ()):
            if namespace is None or doc.namespace in (namespace, ""):
                return doc
        return None

    def in_namespace(self, namespace: str) -> list[Document]:
        """Documents whose namespace (or "default" when unset) is `namespace`."""
        return self._by_namespace.get(namespace, [])

    # Most renders never ask for these two: built on first use.
    @computed_once
    def _position(self) -> dict[int, int]:
        return {id(doc): i for i, doc in enumerate(self.everything)}

    @computed_once
    def _by_namespace(self) -> dict[str, list[Document]]:
        found: dict[str, list[Document]] = defaultdict(list)
        for doc in self.everything:
            found[doc.namespace or "default"].append(doc)
        return found

    def crd(self, group: str, kind: str) -> Document | None:
        """The CRD of `group`/`kind` in the target's own documents (not the platform's)."""
        return self._crds.get((group, kind))

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A fact about the whole render, computed on first use and kept for the render."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]
