"""Fixtures of volcano-scheduler-conf and volcano-scheduler-conf-ignored (policies/
volcano_scheduler.py): what Volcano v1.15.1's scheduler refuses or drops in its
volcano-scheduler.conf; and of volcano-plugin-flags (policies/volcano.py): how the Volcano
Job plugins parse their arguments. Each failing render differs from its passing one in the
one value checked."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from tests.policies.fixtures import Docs

TIERS: list[dict[str, Any]] = [
    {
        "plugins": [
            {"name": "priority"},
            {"name": "gang", "enablePreemptable": False},
            {"name": "conformance"},
        ]
    },
    {
        "plugins": [
            {"name": "overcommit"},
            {"name": "drf"},
            {"name": "predicates"},
            {"name": "proportion"},
            {"name": "nodeorder"},
            {"name": "binpack"},
        ]
    },
]
BASE: dict[str, Any] = {"actions": "enqueue, allocate, backfill", "tiers": TIERS}


def _conf(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _plugin(tier: int, plugin_name: str, /, **options: Any) -> dict[str, Any]:
    """BASE with the plugin `plugin_name` of tier `tier` given `options` (None drops one)."""
    out = copy.deepcopy(BASE)
    for plugin in out["tiers"][tier]["plugins"]:
        if plugin["name"] == plugin_name:
            for key, value in options.items():
                if value is None:
                    plugin.pop(key, None)
                else:
                    plugin[key] = value
    return out


def configmap(
    config: Any,
    key: str = "volcano-scheduler.conf",
    raw: str | None = None,
    name: str = "volcano-scheduler-configmap",
) -> dict[str, Any]:
    text = raw if raw is not None else yaml.safe_dump(config, sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "volcano-system"},
        "data": {key: text},
    }


def scheduler(
    config_map: str = "volcano-scheduler-configmap", path: str = "/volcano.scheduler/scheduler.yaml"
) -> dict[str, Any]:
    """The volcano-scheduler Deployment of the chart, its --scheduler-conf at `path`."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "volcano-scheduler", "namespace": "volcano-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "volcano-scheduler"}},
            "template": {
                "metadata": {"labels": {"app": "volcano-scheduler"}},
                "spec": {
                    "serviceAccountName": "volcano-scheduler",
                    "containers": [
                        {
                            "name": "volcano-scheduler",
                            "image": "docker.io/volcanosh/vc-scheduler:v1.15.1",
                            "args": [f"--scheduler-conf={path}", "--logtostderr", "-v=3"],
                            "volumeMounts": [
                                {"name": "scheduler-config", "mountPath": "/volcano.scheduler"}
                            ],
                        }
                    ],
                    "volumes": [{"name": "scheduler-config", "configMap": {"name": config_map}}],
                },
            },
        },
    }


def conf(config: Any = None, **kwargs: Any) -> Callable[[], Docs]:
    return lambda: [configmap(BASE if config is None else config, **kwargs)]


def mounted(config: Any) -> Callable[[], Docs]:
    """The configuration under another key, found through the Deployment that mounts it."""
    return lambda: [configmap(config, key="scheduler.yaml"), scheduler()]


def job(
    plugins: dict[str, list[str]], tasks: tuple[str, ...] = ("master", "worker"), replicas: int = 2
) -> Callable[[], Docs]:
    def build() -> Docs:
        return [
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "train", "namespace": "training"},
                "spec": {
                    "schedulerName": "volcano",
                    "minAvailable": replicas * len(tasks) if len(tasks) > 1 else replicas,
                    "plugins": plugins,
                    "tasks": [
                        {
                            "name": task,
                            "replicas": 1 if task in ("master", "chief", "ps") else replicas,
                            "template": {
                                "spec": {
                                    "restartPolicy": "OnFailure",
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "registry.example.com/train:1.0",
                                            "command": ["python", "train.py"],
                                        }
                                    ],
                                }
                            },
                        }
                        for task in tasks
                    ],
                },
            }
        ]

    return build


FIXTURES = {
    "volcano-scheduler-conf": (
        conf(_conf(actions="enqueue, allocate, preemption, backfill")),
        conf(_conf(actions="enqueue, allocate, preempt, backfill")),
    ),
    "volcano-scheduler-conf-ignored": (
        conf(_plugin(1, "proportion", enableOverused=False)),
        conf(_plugin(1, "proportion", enabledOverused=False)),
    ),
    "volcano-plugin-flags": (
        job({"pytorch": ["--port=23456"]}, tasks=("leader", "worker")),
        job({"pytorch": ["--master=leader", "--port=23456"]}, tasks=("leader", "worker")),
    ),
}

MORE = {
    "volcano-scheduler-conf": [
        # a trailing comma leaves an empty action name
        (
            conf(_conf(actions="enqueue, allocate, backfill,")),
            conf(_conf(actions="enqueue, allocate, backfill")),
        ),
        # actions written as a YAML list
        (
            conf(_conf(actions=["enqueue", "allocate", "backfill"])),
            conf(_conf(actions="enqueue, allocate, backfill")),
        ),
        # no actions at all
        (conf(_conf(actions=None)), conf(_conf())),
        # a quoted boolean cannot be decoded into *bool
        (
            conf(_plugin(0, "gang", enablePreemptable="false")),
            conf(_plugin(0, "gang", enablePreemptable=False)),
        ),
        # drf with hierarchy next to proportion in one tier
        (
            conf(_plugin(1, "drf", enableHierarchy=True)),
            conf(_plugin(1, "drf", enableHierarchy=False)),
        ),
        # not YAML
        (
            conf(raw='actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n - x'),
            conf(raw='actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n'),
        ),
        # a ConfigMap under another key, found through the scheduler Deployment's mount
        (
            mounted(_conf(actions="enqueue, allocate, backfil")),
            mounted(_conf(actions="enqueue, allocate, backfill")),
        ),
    ],
    "volcano-scheduler-conf-ignored": [
        # a plugin the scheduler has no builder for
        (
            conf(_plugin(1, "nodeorder", name="node-order")),
            conf(_plugin(1, "nodeorder", name="nodeorder")),
        ),
        # a top-level key the scheduler does not read
        (
            conf(_conf(plugins=[{"name": "gang"}])),
            conf(_conf()),
        ),
        # a quoted overcommit factor, and one below 1
        (
            conf(_plugin(1, "overcommit", arguments={"overcommit-factor": "2.0"})),
            conf(_plugin(1, "overcommit", arguments={"overcommit-factor": 2.0})),
        ),
        (
            conf(_plugin(1, "overcommit", arguments={"overcommit-factor": 0.8})),
            conf(_plugin(1, "overcommit", arguments={"overcommit-factor": 1.0})),
        ),
        # a quoted integer weight
        (
            conf(_plugin(1, "binpack", arguments={"binpack.weight": "10"})),
            conf(_plugin(1, "binpack", arguments={"binpack.weight": 10})),
        ),
        # a configuration that names no action
        (
            conf(_conf(configurations=[{"name": "allocation", "arguments": {}}])),
            conf(_conf(configurations=[{"name": "allocate", "arguments": {}}])),
        ),
        # through the Deployment's mount
        (
            mounted(_plugin(0, "gang", name="gang-scheduling")),
            mounted(_plugin(0, "gang", name="gang")),
        ),
    ],
    "volcano-plugin-flags": [
        # a misspelt flag
        (
            job({"pytorch": ["--master=master", "--prot=29500"]}),
            job({"pytorch": ["--master=master", "--port=29500"]}),
        ),
        # a bool flag given its value as a separate word ends the flags
        (
            job({"pytorch": ["--wait-master-enabled", "true", "--port=29500"]}),
            job({"pytorch": ["--wait-master-enabled=true", "--port=29500"]}),
        ),
        # an int flag that is not a number
        (
            job({"mpi": ["--port=ssh"], "ssh": [], "svc": []}),
            job({"mpi": ["--port=22"], "ssh": [], "svc": []}),
        ),
        # a flag without its value
        (
            job({"tensorflow": ["--ps=master", "--worker"]}),
            job({"tensorflow": ["--ps=master", "--worker", "worker"]}),
        ),
        # ssh port out of range
        (
            job({"ssh": ["--ssh-port=70000"], "svc": []}),
            job({"ssh": ["--ssh-port=2222"], "svc": []}),
        ),
        # unknown svc flag
        (
            job({"svc": ["--publish-not-ready-address"]}),
            job({"svc": ["--publish-not-ready-addresses"]}),
        ),
        # arguments given to env, which takes none
        (job({"env": ["--index"], "svc": []}), job({"env": [], "svc": []})),
        # tensorflow tasks that are none of its roles
        (
            job({"tensorflow": []}, tasks=("ps", "trainer")),
            job({"tensorflow": []}, tasks=("ps", "worker")),
        ),
        (
            job({"tensorflow": []}, tasks=("parameter-server", "worker")),
            job({"tensorflow": ["--ps=parameter-server"]}, tasks=("parameter-server", "worker")),
        ),
        # pytorch: a task that is neither master nor worker
        (
            job({"pytorch": []}, tasks=("master", "worker", "evaluator")),
            job({"pytorch": []}, tasks=("master", "worker")),
        ),
        # the master flag names the Job's task
        (
            job({"pytorch": []}, tasks=("leader", "worker")),
            job({"pytorch": ["--master", "leader"]}, tasks=("leader", "worker")),
        ),
    ],
}


def application(config: Any, as_text: bool = False) -> Callable[[], Docs]:
    """An Argo CD Application of the volcano chart whose Helm values override the
    scheduler's configuration (custom.scheduler_config_override)."""

    def build() -> Docs:
        values = {"custom": {"scheduler_config_override": yaml.safe_dump(config, sort_keys=False)}}
        helm = {"values": yaml.safe_dump(values)} if as_text else {"valuesObject": values}
        return [
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {"name": "volcano", "namespace": "argocd"},
                "spec": {
                    "project": "default",
                    "source": {
                        "repoURL": "https://volcano-sh.github.io/helm-charts",
                        "chart": "volcano",
                        "targetRevision": "1.15.1",
                        "helm": helm,
                    },
                    "destination": {
                        "server": "https://kubernetes.default.svc",
                        "namespace": "volcano-system",
                    },
                },
            }
        ]

    return build


MORE["volcano-scheduler-conf"] += [
    (
        application(_plugin(1, "drf", enableHierarchy=True)),
        application(_plugin(1, "drf", enableHierarchy=False)),
    ),
    (
        application(_conf(actions="enqueue allocate backfill"), as_text=True),
        application(_conf(actions="enqueue, allocate, backfill"), as_text=True),
    ),
]
MORE["volcano-scheduler-conf-ignored"] += [
    (
        application(_plugin(1, "proportion", name="proportions")),
        application(_plugin(1, "proportion", name="proportion")),
    ),
]
MORE["volcano-scheduler-conf"].append(
    # metrics is map[string]string: nested keys are written flat
    (
        conf(_conf(metrics={"type": "prometheus", "tls": {"insecureSkipVerify": "false"}})),
        conf(_conf(metrics={"type": "prometheus", "tls.insecureSkipVerify": "false"})),
    )
)
