"""Builds several kustomizations in one kustomize process, each output as its own build's.

Most of a small kustomization's build is kustomize starting and loading its OpenAPI
schema (about 0.2 CPU-s for a run overlay, against 0.03 s more per run inside a
shared process). So kustomizations that cannot affect each other are built as the
`resources` of one temporary kustomization, each under a slot kustomization whose
only transformer annotates its objects with the slot's number; the output is split
by that annotation, the annotation and its transformation record are removed, and
each slot's objects keep their order (kustomize's legacy sort is a total order on
object ids, so the objects of one slot sort among themselves as they do alone;
with `fifo` each slot's objects come out together, in their own order).

What a build does once at its top over all objects is where slots could meet:
name references are fixed (`nameReference`), variables resolved, local-config
objects dropped. So a kustomization is built with others only when none of its
kustomizations uses variables, custom transformer configurations, CRD settings,
plugins or Helm charts, and none of its files mentions local-config; and a slot's
output is used only when none of its strings names an object of a kind other
objects' references are fixed to (kustomize's nameReference targets) that another
slot holds. The OpenAPI schema is the other thing a process shares: kustomize keeps
the first `openapi` setting it meets. Kustomizations built together have the same
first setting (the caller groups them by it), met before any generator or
transformer of theirs runs. Anything else, and any failure of the shared build,
falls back to building the kustomization alone: the output is always what it would
have been.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import threading
from pathlib import Path

from trainops.errors import InputError
from trainops.render import kustomize
from trainops.render.inputs import InputGraph

# Kustomization fields whose effect stays inside the kustomization's own objects.
SHAREABLE_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "metadata",
        "resources",
        "bases",
        "components",
        "patches",
        "patchesStrategicMerge",
        "patchesJson6902",
        "images",
        "namespace",
        "namePrefix",
        "nameSuffix",
        "labels",
        "commonLabels",
        "commonAnnotations",
        "replicas",
        "replacements",
        "configMapGenerator",
        "secretGenerator",
        "generatorOptions",
        "sortOptions",
        "buildMetadata",
        "openapi",
    }
)
# The kinds kustomize rewrites references to when their names change (its built-in
# nameReference configuration, kustomize v5.5 api/internal/konfig/builtinpluginconsts).
REFERENCED_KINDS = frozenset(
    {
        "Deployment",
        "ReplicationController",
        "ReplicaSet",
        "StatefulSet",
        "ConfigMap",
        "Secret",
        "Service",
        "Role",
        "ClusterRole",
        "ServiceAccount",
        "PersistentVolumeClaim",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "IngressClass",
        "ValidatingAdmissionPolicy",
    }
)
LOCAL_CONFIG = b"config.kubernetes.io/local-config"
# Most kustomizations one kustomize process builds: a failure rebuilds this many alone.
MAX_SLOTS = 32

_DOCUMENT_SEPARATOR = re.compile(r"^---\n", re.MULTILINE)
_KIND = re.compile(r"^kind: *(.*)$", re.MULTILINE)
_TOKEN = re.compile(r"[A-Za-z0-9._-]+")


class _LocalConfigScan:
    """Whether a file mentions local-config, each file read once per process."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], bool] = {}
        self._lock = threading.Lock()

    def __call__(self, path: Path) -> bool:
        try:
            info = path.stat()
            memo_key = (str(path), info.st_size, info.st_mtime_ns)
            with self._lock:
                known = self._known.get(memo_key)
            if known is None:
                known = LOCAL_CONFIG in path.read_bytes()
                with self._lock:
                    self._known[memo_key] = known
        except OSError:
            return True  # unreadable now: let the build alone report it
        return known


_mentions_local_config = _LocalConfigScan()


def shareable(graph: InputGraph) -> bool:
    """Whether this kustomization's build may share a kustomize process with others."""
    if graph.schema is not None and (
        graph.schema[0] == "unknown" or graph.transformed_before_schema
    ):
        return False
    return (
        not graph.remotes
        and graph.root_kind == "Kustomization"
        and graph.fields <= SHAREABLE_FIELDS
        and not any(_mentions_local_config(path) for path in graph.files)
    )


def build_together(graphs: list[InputGraph], allow_network: bool = False) -> list[str | None]:
    """Each kustomization's output as `kustomize.build(root, ..., relative origins)` gives
    it, built in one kustomize process; None where it must be built alone.

    The kustomizations must be `shareable` and share one `sortOptions` and one first
    OpenAPI schema (the same schema file content or built-in version, or none).
    """
    if len(graphs) < 2:
        return [None] * len(graphs)
    nonce = secrets.token_hex(8)
    marker = f"trainops.dev/batch-slot-{nonce}"
    transformer = f"trainops-batch-slot-{nonce}"
    sort = kustomize.sort_options(graphs[0].root)
    with tempfile.TemporaryDirectory(prefix="trainops-batch-") as tmp:
        top = Path(tmp)
        slots = []
        for number, graph in enumerate(graphs):
            slot = top / f"s{number}"
            slot.mkdir()
            config = {
                "apiVersion": "builtin",
                "kind": "AnnotationsTransformer",
                "metadata": {"name": transformer},
                "annotations": {marker: f"s{number}"},
                "fieldSpecs": [{"path": "metadata/annotations", "create": True}],
            }
            spec = {
                "resources": [os.path.relpath(graph.root, slot)],
                "transformers": [json.dumps(config, indent=1)],
            }
            (slot / "kustomization.yaml").write_text(json.dumps(spec))
            slots.append(slot.name)
        spec = {"resources": slots, "buildMetadata": kustomize.BUILD_METADATA}
        if sort is not None:
            spec["sortOptions"] = sort
        (top / "kustomization.yaml").write_text(json.dumps(spec))
        try:
            text = kustomize.run(top, str(top), allow_network)
        except InputError:
            return [None] * len(graphs)
        outputs = _split(text, len(graphs), marker, transformer)
        if outputs is None:
            return [None] * len(graphs)
        unshared = _meeting_slots(outputs)
        texts: list[str | None] = []
        for number, (graph, documents) in enumerate(zip(graphs, outputs, strict=True)):
            if number in unshared:
                texts.append(None)
                continue
            root = graph.root
            texts.append(
                kustomize.rewrite_origin_paths(
                    "---\n".join(documents),
                    lambda path, root=root: os.path.relpath(os.path.normpath(top / path), root),
                )
            )
        return texts


def _split(text: str, count: int, marker: str, transformer: str) -> list[list[str]] | None:
    """Each slot's documents with the slot's marks removed; None if one is unmarked."""
    mark = re.compile(rf"^    {re.escape(marker)}: \"?s(\d+)\"?\n", re.MULTILINE)
    record = re.compile(
        r"^      - configuredIn: s\d+/kustomization\.yaml\n"
        r"        configuredBy:\n"
        r"          apiVersion: builtin\n"
        r"          kind: AnnotationsTransformer\n"
        rf"          name: {re.escape(transformer)}\n",
        re.MULTILINE,
    )
    empty_record = re.compile(
        r"^    (?:alpha\.)?config\.kubernetes\.io/transformations: \|-?\n(?!      )", re.MULTILINE
    )
    outputs: list[list[str]] = [[] for _ in range(count)]
    if not text:
        return outputs
    for document in _DOCUMENT_SEPARATOR.split(text):
        found = mark.search(document)
        if found is None or int(found.group(1)) >= count:
            return None
        document = document[: found.start()] + document[found.end() :]
        document, removed = record.subn("", document, count=1)
        if removed:
            document = empty_record.sub("", document, count=1)
        outputs[int(found.group(1))].append(document)
    return outputs


def _meeting_slots(outputs: list[list[str]]) -> set[int]:
    """Slots holding a string that names a referenced-kind object of another slot.

    The shared build fixes name references across all slots at once, so such a
    string may have been rewritten by an object that its own build never saw.
    """
    holders: dict[str, set[int]] = {}
    for number, documents in enumerate(outputs):
        for document in documents:
            kind = _KIND.search(document)
            name = _metadata_name(document)
            if kind and name and kind.group(1).strip("'\"") in REFERENCED_KINDS:
                holders.setdefault(name, set()).add(number)
    meeting = set()
    for number, documents in enumerate(outputs):
        text = "".join(documents)
        tokens = set(_TOKEN.findall(text))
        for name, slots in holders.items():
            if slots - {number} and (name in tokens if _TOKEN.fullmatch(name) else name in text):
                meeting.add(number)
                break
    return meeting


def _metadata_name(document: str) -> str | None:
    """metadata.name of one kustomize output document (block style, two-space indent)."""
    inside = False
    for line in document.split("\n"):
        if inside:
            if not line.startswith(" "):
                return None
            if line.startswith("  name: "):
                return line[len("  name: ") :].strip().strip("'\"")
        elif line == "metadata:":
            inside = True
    return None
