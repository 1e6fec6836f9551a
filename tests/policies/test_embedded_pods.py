"""Pod templates inside any custom resource are found by their shape and checked.

The files in tests/data/embedded-pods are upstream examples (SOURCE.md): a Ray cluster
and a Ray job, AppWrappers around a Deployment and a Pod, a KAITO workspace, a Katib
experiment. Pod rules report on them at the custom resource's own paths.
"""

from __future__ import annotations

import copy

from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import Context
from trainops.policy.engine import evaluate
from trainops.policy.pods import pod_templates
from trainops.policy.settings import PolicySettings, load_pack
from trainops.yamlio import load_documents, read_text

load_pack(REPO / "policies")
EXAMPLES = REPO / "tests" / "data" / "embedded-pods"


def _documents(name: str) -> list[Document]:
    path = EXAMPLES / name
    return [
        d if isinstance(d, Document) else Document(obj=d, source=str(path))
        for d in load_documents(read_text(path), str(path))
    ]


def _pods(name: str) -> list[tuple[str, str, int | None]]:
    return [
        (pod.role, ".".join(map(str, pod.path)), pod.replicas)
        for doc in _documents(name)
        for pod in pod_templates(doc)
    ]


def test_ray_head_and_worker_groups():
    assert _pods("kuberay-ray-cluster.complete.yaml") == [
        ("headGroupSpec", "spec.headGroupSpec.template.spec", None),
        ("small-group", "spec.workerGroupSpecs.0.template.spec", 1),
    ]
    assert _pods("kuberay-ray-job.pytorch-mnist.yaml") == [
        ("headGroupSpec", "spec.rayClusterSpec.headGroupSpec.template.spec", None),
        ("small-group", "spec.rayClusterSpec.workerGroupSpecs.0.template.spec", 2),
    ]


def test_appwrapper_components():
    assert _pods("appwrapper-wrapped-deployment.yaml") == [
        ("components", "spec.components.0.template.spec.template.spec", 2)
    ]
    assert _pods("appwrapper-wrapped-pod.yaml") == [
        ("components", "spec.components.0.template.spec", None)
    ]


def test_kaito_workspace_outside_spec():
    assert _pods("kaito-custom-model-deployment.yaml") == [
        ("inference", "inference.template.spec", None)
    ]


def test_katib_trial_template():
    assert _pods("katib-enas-gpu.yaml") == [
        ("trialSpec", "spec.trialTemplate.trialSpec.spec.template.spec", None)
    ]


def test_pod_rules_report_at_the_custom_resource_paths():
    documents = _documents("katib-enas-gpu.yaml")
    ctx = Context(Target("file", "katib-enas-gpu.yaml"), documents)
    pinned = [f for f in evaluate(ctx, PolicySettings()) if f.rule == "image-pinned"]
    assert [(f.resource, f.path) for f in pinned] == [
        (
            "Experiment/kubeflow/enas-gpu",
            "spec.trialTemplate.trialSpec.spec.template.spec.containers[0].image",
        )
    ]


def test_kubernetes_own_kinds_are_not_searched():
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "x.example.com"},
        "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "b:1"}]}}},
    }
    config = {**crd, "apiVersion": "v1", "kind": "ConfigMap"}
    assert pod_templates(Document(obj=crd, source="x")) == []
    assert pod_templates(Document(obj=config, source="x")) == []
    custom = {**crd, "apiVersion": "example.com/v1", "kind": "Widget"}
    assert len(pod_templates(Document(obj=custom, source="x"))) == 1


def test_the_search_is_bounded_on_hostile_nesting():
    node: dict = {"spec": {"containers": [{"name": "a", "image": "b:1"}]}}
    for _ in range(5000):
        node = {"next": node}
    wide = {f"k{i}": copy.deepcopy({"a": [1, 2]}) for i in range(50_000)}
    deep = Document(obj={"apiVersion": "example.com/v1", "kind": "W", "spec": node}, source="x")
    assert pod_templates(deep) == []  # deeper than the walk goes
    broad = Document(obj={"apiVersion": "example.com/v1", "kind": "W", "spec": wide}, source="x")
    assert pod_templates(broad) == []
