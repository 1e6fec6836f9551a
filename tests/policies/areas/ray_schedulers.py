"""Fixtures of KubeRay's batch-scheduler integration and serve Service (policies/ray.py) and
of Volcano's ray job plugin (policies/volcano.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]


def _operator(*args: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kuberay-operator", "namespace": "ray-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "kuberay-operator"}},
            "template": {
                "metadata": {"labels": {"app": "kuberay-operator"}},
                "spec": {
                    "containers": [
                        {
                            "name": "kuberay-operator",
                            "image": "quay.io/kuberay/operator:v1.7.0",
                            "command": ["/manager"],
                            "args": list(args),
                        }
                    ]
                },
            },
        },
    }


def _cluster(head_ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    head: dict[str, Any] = {"name": "ray-head", "image": "rayproject/ray:2.52.0"}
    if head_ports is not None:
        head["ports"] = head_ports
    return {
        "rayVersion": "2.52.0",
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}},
        "workerGroupSpecs": [
            {
                "groupName": "gpu",
                "replicas": 2,
                "minReplicas": 2,
                "maxReplicas": 2,
                "rayStartParams": {},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-worker",
                                "image": "rayproject/ray:2.52.0-gpu",
                                "resources": {"limits": {"nvidia.com/gpu": 8}},
                            }
                        ]
                    }
                },
            }
        ],
    }


def _rayjob(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "entrypoint": "python /app/train.py",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 600,
        "rayClusterSpec": _cluster(),
    }
    for key, value in spec.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    meta: dict[str, Any] = {"name": "ray-train", "namespace": NAMESPACE}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": body}


def _raycluster(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    head_ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "ray-train", "namespace": NAMESPACE}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta,
        "spec": _cluster(head_ports),
    }


def _rayservice(head_ports: list[dict[str, Any]], serve_service: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serveConfigV2": "applications: []\n",
        "rayClusterConfig": _cluster(head_ports),
    }
    if serve_service:
        spec["serveService"] = {
            "metadata": {"name": "llm-serve"},
            "spec": {"ports": [{"name": "http", "port": 8000}]},
        }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "llm", "namespace": NAMESPACE},
        "spec": spec,
    }


def _volcano_queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": True},
    }


def _render(*documents: dict[str, Any]) -> Callable[[], Docs]:
    return lambda: [copy.deepcopy(d) for d in documents]


SELECTOR = {"clusterSelector": {"ray.io/cluster": "shared"}, "rayClusterSpec": None}
SELECTOR.update(shutdownAfterJobFinishes=None, ttlSecondsAfterFinished=None)
MODE = "volcano.sh/network-topology-mode"
TIER = "volcano.sh/network-topology-highest-tier-allowed"
QUEUE = "volcano.sh/queue-name"
HTTP = [{"name": "dashboard", "containerPort": 8265}, {"name": "http", "containerPort": 8000}]
SERVE = [
    {"name": "dashboard", "containerPort": 8265},
    {"name": "serve-http", "containerPort": 8000},
]


def _ray_job(
    plugin_args: list[str] | None = None,
    names: tuple[str, str] = ("head", "worker"),
    containers: tuple[str, str] = ("head", "worker"),
    head_replicas: int = 1,
    head_command: list[str] | None = None,
) -> Callable[[], Docs]:
    def task(name: str, container: str, replicas: int, command: list[str] | None) -> dict:
        body: dict[str, Any] = {"name": container, "image": "rayproject/ray:2.52.0"}
        if command:
            body["command"] = command
        return {
            "name": name,
            "replicas": replicas,
            "template": {"spec": {"restartPolicy": "OnFailure", "containers": [body]}},
        }

    def build() -> Docs:
        return [
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "ray", "namespace": NAMESPACE},
                "spec": {
                    "minAvailable": 1 + head_replicas,
                    "schedulerName": "volcano",
                    "plugins": {"ray": list(plugin_args or [])},
                    "tasks": [
                        task(names[0], containers[0], head_replicas, head_command),
                        task(names[1], containers[1], 2, None),
                    ],
                },
            }
        ]

    return build


FIXTURES: dict[str, Pair] = {
    "kuberay-operator-batch-scheduler": (
        _render(_operator("--batch-scheduler=kueue")),
        _render(_operator("--batch-scheduler=volcano")),
    ),
    "kuberay-batch-scheduler-support": (
        _render(_operator("--batch-scheduler=volcano"), _rayjob(**SELECTOR)),
        _render(_operator("--batch-scheduler=volcano"), _rayjob()),
    ),
    "kuberay-serve-port": (_render(_rayservice(HTTP)), _render(_rayservice(SERVE))),
    "volcano-ray-plugin": (
        _ray_job(names=("ray-head", "ray-worker")),
        _ray_job(),
    ),
}

MORE: dict[str, list[Pair]] = {
    "kuberay-operator-batch-scheduler": [
        (
            _render(_operator("--enable-batch-scheduler", "--batch-scheduler=volcano")),
            _render(_operator("--enable-batch-scheduler")),
        ),
        (
            _render(
                _operator("--feature-gates=KubernetesWAS=true", "--batch-scheduler", "volcano")
            ),
            _render(_operator("--feature-gates=KubernetesWAS=true")),
        ),
    ],
    "kuberay-batch-scheduler-support": [
        (
            _render(_operator("--batch-scheduler=kai-scheduler"), _rayjob()),
            _render(
                _operator("--batch-scheduler=kai-scheduler"), _rayjob(submissionMode="HTTPMode")
            ),
        ),
        (
            _render(
                _operator("--enable-batch-scheduler"), _raycluster({MODE: "hard", TIER: "rack"})
            ),
            _render(_operator("--enable-batch-scheduler"), _raycluster({MODE: "hard", TIER: "2"})),
        ),
        (
            _render(_operator("--batch-scheduler=volcano"), _raycluster({MODE: "strict"})),
            _render(_operator("--batch-scheduler=volcano"), _raycluster({MODE: "soft"})),
        ),
        # Without the operator in the render: a warning, the labels are certainly unusable.
        (
            _render(_raycluster({MODE: "hard", TIER: "-1"})),
            _render(_raycluster({MODE: "hard", TIER: "1"})),
        ),
        (_render(_raycluster({TIER: "1"})), _render(_raycluster({MODE: "hard", TIER: "1"}))),
        (
            _render(_operator("--batch-scheduler=kai-scheduler"), _raycluster({QUEUE: "research"})),
            _render(_operator("--batch-scheduler=volcano"), _raycluster({QUEUE: "research"})),
        ),
        (
            _render(
                _operator("--batch-scheduler=volcano"),
                _volcano_queue("research"),
                _raycluster({QUEUE: "team-b"}),
            ),
            _render(
                _operator("--batch-scheduler=volcano"),
                _volcano_queue("research"),
                _raycluster({QUEUE: "research"}),
            ),
        ),
        # A --config file replaces the flags: nothing is known of the scheduler.
        (
            _render(_operator("--batch-scheduler=volcano"), _rayjob(**SELECTOR)),
            _render(_operator("--config", "/etc/kuberay/config.yaml"), _rayjob(**SELECTOR)),
        ),
    ],
    "kuberay-serve-port": [
        (
            _render(
                _raycluster(annotations={"ray.io/enable-serve-service": "true"}, head_ports=HTTP)
            ),
            _render(_raycluster(head_ports=HTTP)),
        ),
        (_render(_rayservice(HTTP)), _render(_rayservice(HTTP, serve_service=True))),
        # No ports at all: KubeRay uses its defaults, serve among them.
        (_render(_rayservice([{"containerPort": 8000}])), _render(_rayservice([]))),
    ],
    "volcano-ray-plugin": [
        (
            _ray_job(["--head=leader"]),
            _ray_job(
                ["--head=ray-head", "--worker", "ray-worker"], names=("ray-head", "ray-worker")
            ),
        ),
        (
            _ray_job(containers=("ray", "worker")),
            _ray_job(["--headContainer=ray"], containers=("ray", "worker")),
        ),
        (_ray_job(head_command=["python", "/app/train.py"]), _ray_job()),
        (_ray_job(head_replicas=2), _ray_job()),
        (_ray_job(["--gcs-port=6380"]), _ray_job(["--port=6380"])),
    ],
}
