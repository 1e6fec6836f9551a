"""Builds the OpenAPI document that lets kustomize merge lists inside training jobs.

Kustomize merges lists in strategic-merge patches (containers by name, env by
name, volumes by name...) only for types it has an OpenAPI schema for; for
custom resources such as PyTorchJob it replaces the whole list, so an overlay
that sets one NCCL variable silently drops every other one. Kustomize accepts
a custom schema (`openapi: {path: ...}`), but that schema then replaces its
built-in one for the whole build. The document generated here therefore holds
every core Kubernetes definition (with their patch strategies, descriptions
dropped) plus the training kinds, whose replica specs point at the core
PodTemplateSpec and so inherit its merge keys, and the JobSet-shaped kinds
(Trainer v2 runtimes, JobSet), whose replicatedJobs merge by name and point at
the core JobTemplateSpec.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# group, versions, kind, field holding the replica specs, replica types. MPIJob has
# the same shape in the Training Operator (v1) and the MPI Operator v2 (v2beta1).
TRAINING_KINDS = (
    ("kubeflow.org", ("v1",), "PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker")),
    ("kubeflow.org", ("v1", "v2beta1"), "MPIJob", "mpiReplicaSpecs", ("Launcher", "Worker")),
    (
        "kubeflow.org",
        ("v1",),
        "TFJob",
        "tfReplicaSpecs",
        ("Chief", "Master", "PS", "Worker", "Evaluator"),
    ),
    ("kubeflow.org", ("v1",), "JAXJob", "jaxReplicaSpecs", ("Worker",)),
    ("kubeflow.org", ("v1",), "PaddleJob", "paddleReplicaSpecs", ("Master", "Worker")),
    ("kubeflow.org", ("v1",), "XGBoostJob", "xgbReplicaSpecs", ("Master", "Worker")),
)
# group, version, kind, path to the JobSet spec holding replicatedJobs (a list
# merged by name, each item a Job template whose pod template has core merge keys).
JOBSET_KINDS = (
    ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", ("spec", "template", "spec")),
    ("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", ("spec", "template", "spec")),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", ("spec",)),
)
_KEPT = {
    "type",
    "items",
    "additionalProperties",
    "$ref",
    "format",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
}
_REF = re.compile(r"^#/\$defs/")


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "properties":
                out[key] = {name: _strip(sub) for name, sub in value.items()}
            elif key.startswith("x-kubernetes-") and key in _KEPT:
                out[key] = value
            elif key in _KEPT:
                out[key] = _strip(value)
        return out
    if isinstance(node, list):
        return [_strip(item) for item in node]
    if isinstance(node, str):
        return _REF.sub("#/definitions/", node)
    return node


def build(core_definitions: dict[str, Any]) -> dict[str, Any]:
    definitions = {name: _strip(schema) for name, schema in core_definitions["$defs"].items()}
    replica = {
        "type": "object",
        "properties": {"template": {"$ref": "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"}},
    }
    definitions["dev.trainops.ReplicaSpec"] = replica
    for group, versions, kind, field, replica_types in TRAINING_KINDS:
        definitions[f"dev.trainops.{kind}"] = {
            "type": "object",
            "properties": {
                "metadata": {
                    "$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
                },
                "spec": {
                    "type": "object",
                    "properties": {
                        field: {
                            "type": "object",
                            "properties": {
                                name: {"$ref": "#/definitions/dev.trainops.ReplicaSpec"}
                                for name in replica_types
                            },
                        }
                    },
                },
            },
            "x-kubernetes-group-version-kind": [
                {"group": group, "kind": kind, "version": version} for version in versions
            ],
        }
    definitions["dev.trainops.ReplicatedJob"] = {
        "type": "object",
        "properties": {"template": {"$ref": "#/definitions/io.k8s.api.batch.v1.JobTemplateSpec"}},
    }
    for group, version, kind, path in JOBSET_KINDS:
        node: dict[str, Any] = {
            "type": "object",
            "properties": {
                "replicatedJobs": {
                    "type": "array",
                    "items": {"$ref": "#/definitions/dev.trainops.ReplicatedJob"},
                    "x-kubernetes-patch-merge-key": "name",
                    "x-kubernetes-patch-strategy": "merge",
                }
            },
        }
        for step in reversed(path[1:]):
            node = {"type": "object", "properties": {step: node}}
        definitions[f"dev.trainops.{kind}"] = {
            "type": "object",
            "properties": {
                "metadata": {
                    "$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
                },
                path[0]: node,
            },
            "x-kubernetes-group-version-kind": [{"group": group, "kind": kind, "version": version}],
        }
    return {
        "swagger": "2.0",
        "info": {
            "title": "Kubernetes core types and training jobs, for kustomize merges",
            "version": "v1",
        },
        "paths": {},
        "definitions": definitions,
    }


def serialise(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"


def load_core_definitions(bundled_dir: Path) -> dict[str, Any]:
    return json.loads((bundled_dir / "_definitions.json").read_bytes())
