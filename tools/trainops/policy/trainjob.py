"""The pods a TrainJob will create: its runtime's JobSet template with the TrainJob applied.

Kubeflow Trainer v2 builds a TrainJob's JobSet from the (Cluster)TrainingRuntime it
references. The TrainJob's `runtimePatches` merge into the runtime's template the
way server-side apply merges (named list items by name, other lists replaced),
and its `trainer` fields override the trainer node's container (image, command,
args, env by name, requests and limits by resource name) and its node count.
Every field the TrainJob sets remembers where in the TrainJob it was written, so a
finding on the effective pod is reported at the TrainJob's own path; a finding on
what the runtime alone provides is reported at `spec.runtimeRef` and names the
runtime.
"""

from __future__ import annotations

import copy
from typing import Any

from trainops.model import Document
from trainops.policy.pods import (
    MERGED_ITEM,
    PodTemplate,
    is_int,
    mapping,
    replicated_job_templates,
)

TRAINER_STEP_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_CONTAINER = "node"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# Lists the TrainJob CRD declares as maps, with their key (x-kubernetes-list-map-keys).
KEYED_LISTS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumeMounts": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
}
JOBSET_SPEC = ("spec", "template", "spec")  # where a runtime keeps its JobSet spec


Path = tuple[Any, ...]


def runtime_ref(trainjob: Document) -> tuple[str, str] | None:
    """(kind, name) of the runtime a TrainJob references, or None when it names none."""
    spec = trainjob.obj.get("spec")
    ref = spec.get("runtimeRef") if isinstance(spec, dict) else None
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        return None
    kind = ref.get("kind") if isinstance(ref.get("kind"), str) else RUNTIME_KINDS[0]
    return kind, ref["name"]


def effective_pods(trainjob: Document, runtime: Document) -> list[PodTemplate]:
    """Pod templates of the JobSet that `runtime` and `trainjob` together make."""
    spec = trainjob.obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    template = copy.deepcopy(mapping(mapping(runtime.obj.get("spec")).get("template")))
    sources: dict[Path, Path] = {}
    for index, patch in enumerate(_items(spec.get("runtimePatches"))):
        patched = mapping(mapping(patch).get("trainingRuntimeSpec")).get("template")
        if isinstance(patched, dict):
            there = ("spec", "runtimePatches", index, "trainingRuntimeSpec", "template")
            _merge(template, patched, JOBSET_SPEC[:2], there, sources)
    jobset = mapping(template.get("spec"))
    trainer = mapping(spec.get("trainer"))
    nodes = trainer.get("numNodes")
    if not is_int(nodes):
        policy = mapping(mapping(runtime.obj.get("spec")).get("mlPolicy"))
        nodes = policy.get("numNodes", 1)
    step = _trainer_job(jobset)
    if step is not None:
        _apply_trainer(jobset, step, trainer, sources)
    pods = []
    for pod in replicated_job_templates(trainjob, jobset, JOBSET_SPEC):
        if step is not None and pod.path[len(JOBSET_SPEC) + 1] == step:
            pod.replicas = nodes if is_int(nodes) else None
        pod.runtime = runtime
        pod.sources = sources
        pods.append(pod)
    return pods


def _trainer_job(jobset: dict[str, Any]) -> int | None:
    """Index of the replicated job that runs the trainer nodes."""
    jobs = _items(jobset.get("replicatedJobs"))
    for index, job in enumerate(jobs):
        labels = mapping(mapping(mapping(job).get("template")).get("metadata")).get("labels")
        if mapping(labels).get(TRAINER_STEP_LABEL) == "trainer":
            return index
    for index, job in enumerate(jobs):
        if mapping(job).get("name") == TRAINER_CONTAINER:
            return index
    return None


def _apply_trainer(
    jobset: dict[str, Any], step: int, trainer: dict[str, Any], sources: dict[Path, Path]
) -> None:
    job = jobset["replicatedJobs"][step]
    pod_spec = mapping(
        mapping(mapping(mapping(job.get("template")).get("spec")).get("template")).get("spec")
    )
    containers = _items(pod_spec.get("containers"))
    index = next(
        (i for i, c in enumerate(containers) if mapping(c).get("name") == TRAINER_CONTAINER),
        0 if containers else None,
    )
    if index is None or not isinstance(containers[index], dict):
        return
    container = containers[index]
    here = (*JOBSET_SPEC, "replicatedJobs", step, "template", "spec", "template", "spec")
    here = (*here, "containers", index)
    there = ("spec", "trainer")
    for field in ("image", "command", "args"):
        if field in trainer:
            container[field] = copy.deepcopy(trainer[field])
            sources[(*here, field)] = (*there, field)
    if isinstance(trainer.get("resourcesPerNode"), dict):
        # Trainer merges requests and limits by resource name (MergeResourceRequirements):
        # a TrainJob asking for more memory keeps the runtime's GPUs.
        resources = container.get("resources")
        if not isinstance(resources, dict):
            resources = container["resources"] = {}
        _merge(
            resources,
            trainer["resourcesPerNode"],
            (*here, "resources"),
            (*there, "resourcesPerNode"),
            sources,
        )
    if isinstance(trainer.get("env"), list):
        env = container.setdefault("env", [])
        if isinstance(env, list):
            _merge_keyed(env, trainer["env"], "name", (*here, "env"), (*there, "env"), sources)


def _merge(
    base: dict[str, Any], patch: dict[str, Any], here: Path, there: Path, sources: dict[Path, Path]
) -> None:
    """Merge `patch` into `base` as server-side apply would, noting where each field came from."""
    for key, value in patch.items():
        current = base.get(key)
        at, src = (*here, key), (*there, key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value, at, src, sources)
        elif isinstance(value, list) and isinstance(current, list) and key in KEYED_LISTS:
            _merge_keyed(current, value, KEYED_LISTS[key], at, src, sources)
        else:
            base[key] = copy.deepcopy(value)
            sources[at] = src


def _merge_keyed(
    current: list[Any],
    items: list[Any],
    key: str,
    here: Path,
    there: Path,
    sources: dict[Path, Path],
) -> None:
    positions = {item.get(key): i for i, item in enumerate(current) if isinstance(item, dict)}
    for j, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        i = positions.get(item.get(key))
        if i is None:
            current.append(copy.deepcopy(item))
            i = positions[item.get(key)] = len(current) - 1
            sources[(*here, i)] = (*there, j)
        else:
            _merge(current[i], item, (*here, i), (*there, j), sources)
            # A finding about the merged item as a whole belongs to the patch that changed it.
            sources.setdefault((*here, i, MERGED_ITEM), (*there, j))


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
