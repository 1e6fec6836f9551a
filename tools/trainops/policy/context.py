"""What a rule may look at besides the resource it checks: the Context of one render.

The Context holds every document of the same render, the cluster's platform render for
runs and templates, the cluster profile when there is one and, for a run, the other
directories whose Argo CD Application takes its Application's name. Everything is a lookup on
an index built once per render (policy/index.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from trainops.appsets import NameConflict
from trainops.model import Document, Target
from trainops.policy import trainjob
from trainops.policy.index import RenderIndex
from trainops.policy.pods import PodTemplate, effective_labels, pod_templates
from trainops.profile.model import ClusterProfile
from trainops.render.inputs import InputGraph
from trainops.yamlio import cycle_collection_paused


class KnownNames(NamedTuple):
    """What a reference could have named, for a message: how many names, the first few."""

    count: int
    first: tuple[str, ...]

    SHOWN = 5

    @classmethod
    def of(cls, names: Iterable[str]) -> KnownNames:
        ordered = sorted(set(names))
        return cls(len(ordered), tuple(ordered[: cls.SHOWN]))

    def __str__(self) -> str:
        rest = self.count - len(self.first)
        return ", ".join(self.first) + (f" and {rest} more" if rest > 0 else "")


class Context:
    """What a rule may look at besides the resource it checks.

    Everything is a lookup on an index built once per render (`policy/index.py`):
    rules never get the render as a list, so no rule can rescan it per resource.
    """

    def __init__(
        self,
        target: Target,
        documents: Iterable[Document],
        platform: Iterable[Document] = (),
        profile: ClusterProfile | None = None,
        inputs: InputGraph | None = None,
        name_conflict: NameConflict | None = None,
    ):
        self.target = target
        self.profile = profile
        self.inputs = inputs
        # A run's Argo CD Application name, where other directories' share it.
        self.name_conflict = name_conflict
        platform = list(platform)
        self.has_platform = bool(platform)  # a run or template checked with its cluster
        # Whether exemption annotations may silence security rules here (set by evaluate).
        self.annotations_trusted = False
        with cycle_collection_paused():
            self._index = RenderIndex(documents, platform, platform_wins=self.is_run)
        self._pods: dict[int, list[PodTemplate]] = {}

    def pods(self, doc: Document) -> list[PodTemplate]:
        """The pod templates of `doc`; a TrainJob's are resolved against its runtime."""
        key = id(doc)
        found = self._pods.get(key)
        if found is None:
            runtime = self.runtime_for(doc) if doc.kind == "TrainJob" else None
            if runtime is not None:
                found = trainjob.effective_pods(doc, runtime)
            else:
                found = pod_templates(doc)
            self._pods[key] = found
        return found

    def runtime_for(self, doc: Document) -> Document | None:
        """The (Cluster)TrainingRuntime a TrainJob references, if this render has it."""
        ref = trainjob.runtime_ref(doc)
        if ref is None or ref[0] not in trainjob.RUNTIME_KINDS:
            return None
        kind, name = ref
        namespace = doc.namespace or "default" if kind == "TrainingRuntime" else None
        return self.find(kind, name, namespace)

    @property
    def documents(self) -> list[Document]:
        """Every document of this render (not the platform's), in render order."""
        return self._index.documents

    @property
    def kinds(self) -> frozenset[str]:
        """Every kind this render and the platform's hold."""
        return self._index.kinds

    def of_kind(self, *kinds: str) -> list[Document]:
        """Documents of these kinds in this render and the platform's, in render order."""
        return self._index.of_kind(*kinds)

    def find(self, kind: str, name: str, namespace: str | None = None) -> Document | None:
        """The first `kind` named `name` (in `namespace`, or cluster-scoped)."""
        return self._index.find(kind, name, namespace)

    def crd(self, group: str, kind: str) -> Document | None:
        """The CRD for group/kind when this render (not the platform) creates it."""
        return self._index.crd(group, kind)

    def pods_selected(self, namespace: str, selector: dict[str, Any]) -> list[PodTemplate]:
        """Pod templates in `namespace` whose labels hold every key/value of `selector`."""
        by_label = self._index.memo(
            ("pods-by-label", namespace), lambda: self._label_index(namespace)
        )
        pods, labelled = by_label
        if not selector:
            return list(pods)
        candidates: set[int] | None = None
        for item in selector.items():
            matching = labelled.get((str(item[0]), str(item[1])), set())
            candidates = matching if candidates is None else candidates & matching
            if not candidates:
                return []
        return [pods[i] for i in sorted(candidates or ())]

    def pods_in_namespace(self, namespace: str) -> list[PodTemplate]:
        """Every pod template of the documents in `namespace` ("default" when unset)."""
        return self._index.memo(
            ("pods", namespace),
            lambda: [pod for doc in self._index.in_namespace(namespace) for pod in self.pods(doc)],
        )

    def _label_index(self, namespace: str) -> tuple[list[PodTemplate], dict]:
        pods = self.pods_in_namespace(namespace)
        labelled: dict[tuple[str, str], set[int]] = defaultdict(set)
        for i, pod in enumerate(pods):
            for key, value in effective_labels(pod).items():
                labelled[(str(key), str(value))].add(i)
        return pods, labelled

    def known_names(
        self, *kinds: str, where: Callable[[Document], bool] | None = None
    ) -> KnownNames:
        """The names of the documents of `kinds` (those `where` accepts) in this render
        and the platform's, once per render: what a dangling reference's message names."""
        return self.memo(
            ("known-names", kinds, where),
            lambda: KnownNames.of(d.name for d in self.of_kind(*kinds) if not where or where(d)),
        )

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A fact about the whole render (e.g. every NAD's address ranges), computed once."""
        return self._index.memo(key, compute)

    @property
    def is_run(self) -> bool:
        return self.target.is_run
