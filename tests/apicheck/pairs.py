"""Good/bad pairs: each bad variant is refused by Kubernetes or an operator, its good one is not.

A pair is a valid object and one change that the named upstream check rejects;
`source` is where that check lives (repository, file, function).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

K8S_CORE = "kubernetes/kubernetes pkg/apis/core/validation/validation.go"
K8S_APPS = "kubernetes/kubernetes pkg/apis/apps/validation/validation.go"
K8S_BATCH = "kubernetes/kubernetes pkg/apis/batch/validation/validation.go"
K8S_POLICY = "kubernetes/kubernetes pkg/apis/policy/validation/validation.go"
APIMACHINERY = "kubernetes/apimachinery pkg/util/validation/validation.go"
META = "kubernetes/apimachinery pkg/apis/meta/v1/validation/validation.go"
TRAINING_OPERATOR = "kubeflow/training-operator v1.9 pkg/webhooks/pytorch/pytorchjob_webhook.go"
MPI_OPERATOR = "kubeflow/mpi-operator v0.8.0 pkg/apis/kubeflow/validation/validation.go"
TRAINER = "kubeflow/trainer v2.3.0"
JOBSET = "kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go"
KUEUE = "kubernetes-sigs/kueue v0.18"


@dataclass(frozen=True)
class Pair:
    name: str
    good: dict[str, Any]
    change: Callable[[dict[str, Any]], None]
    rule: str  # the rule id the bad variant's error carries
    source: str  # the upstream check that rejects it

    @property
    def bad(self) -> dict[str, Any]:
        obj = copy.deepcopy(self.good)
        self.change(obj)
        return obj


def at(obj: dict[str, Any], *path: str | int) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def container(name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "ghcr.io/example/trainer:1.0", **extra}


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        container(
                            "web",
                            ports=[{"name": "http", "containerPort": 8080}],
                            volumeMounts=[{"name": "data", "mountPath": "/data"}],
                            resources={
                                "requests": {"cpu": "500m", "memory": "1Gi"},
                                "limits": {"cpu": "1", "memory": "1Gi"},
                            },
                            readinessProbe={"httpGet": {"path": "/", "port": 8080}},
                            livenessProbe={"tcpSocket": {"port": 8080}, "successThreshold": 1},
                        )
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": {"app": "web"}},
                        }
                    ],
                },
            },
        },
    }


def job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "prepare-data"},
        "spec": {
            "completions": 4,
            "parallelism": 4,
            "completionMode": "Indexed",
            "backoffLimitPerIndex": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        container(resources={"limits": {"nvidia.com/gpu": 1}}),
                    ],
                }
            },
        },
    }


def pytorchjob() -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container("pytorch")]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama-sft", "labels": {"kueue.x-k8s.io/queue-name": "training"}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}},
    }


def mpijob() -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl-tests"},
        "spec": {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [container("launcher")]}},
                },
                "Worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [container("worker")]}},
                },
            },
        },
    }


def trainjob() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama-7b-v2"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "image": "ghcr.io/example/trainer:1.0"},
            "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
        },
    }


def runtime() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "template": {
                                        "spec": {"containers": [container("node")]},
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def jobset() -> dict[str, Any]:
    def rjob(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": 2,
            "template": {
                "spec": {
                    "parallelism": 2,
                    "completions": 2,
                    "template": {"spec": {"containers": [container()]}},
                }
            },
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pretrain"},
        "spec": {
            "replicatedJobs": [rjob("leader"), rjob("workers")],
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["leader"]},
            "failurePolicy": {
                "maxRestarts": 3,
                "rules": [
                    {
                        "name": "fail_fast",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
        },
    }


def cluster_queue() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 256},
                                {"name": "memory", "nominalQuota": "2Ti"},
                                {"name": "nvidia.com/gpu", "nominalQuota": 32},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def resource_flavor() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
        "spec": {
            "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }


def topology() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {
            "levels": [
                {"nodeLabel": "cloud.provider.com/topology-block"},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }


def simple(kind: str, api_version: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "example"}, **body}


def _set(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        at(obj, *path[:-1])[path[-1]] = value

    return change


def _delete(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        del at(obj, *path[:-1])[path[-1]]

    return change


POD = ("spec", "template", "spec")
WEB = (*POD, "containers", 0)
JOB_POD = ("spec", "template", "spec")
PT_MASTER = ("spec", "pytorchReplicaSpecs", "Master")
PT_POD = (*PT_MASTER, "template", "spec")
RUNTIME_JOB = ("spec", "template", "spec", "replicatedJobs", 0)
CQ_GROUP = ("spec", "resourceGroups", 0)

PAIRS = [
    # --- object metadata ------------------------------------------------------------------
    Pair(
        "name-not-dns-subdomain",
        deployment(),
        _set("metadata", "name", value="Web_1"),
        "api-validation",
        f"{APIMACHINERY} IsDNS1123Subdomain",
    ),
    Pair(
        "service-name-not-dns1035",
        simple("Service", "v1", {"spec": {"ports": [{"port": 80}]}}),
        _set("metadata", "name", value="1web"),
        "api-validation",
        f"{K8S_CORE} ValidateServiceName (NameIsDNS1035Label)",
    ),
    Pair(
        "label-value-invalid",
        deployment(),
        _set("metadata", "labels", "app", value="web app"),
        "api-validation",
        f"{META} ValidateLabels (IsValidLabelValue)",
    ),
    Pair(
        "label-key-invalid",
        deployment(),
        _set("metadata", "labels", value={"-app": "web"}),
        "api-validation",
        f"{META} ValidateLabelName (IsQualifiedName)",
    ),
    Pair(
        "annotations-too-large",
        deployment(),
        _set("metadata", "annotations", value={"note": "x" * 262_200}),
        "api-validation",
        "kubernetes/apimachinery pkg/api/validation/objectmeta.go ValidateAnnotationsSize",
    ),
    # --- pod spec (Deployment: validated at apply) ----------------------------------------
    Pair(
        "selector-does-not-match-labels",
        deployment(),
        _set("spec", "template", "metadata", "labels", value={"app": "other"}),
        "api-validation",
        f"{K8S_APPS} ValidatePodTemplateSpecForReplicaSet",
    ),
    Pair(
        "mount-of-undefined-volume",
        deployment(),
        _set(*WEB, "volumeMounts", 0, "name", value="cache"),
        "api-validation",
        f"{K8S_CORE} ValidateVolumeMounts",
    ),
    Pair(
        "duplicate-container-name",
        deployment(),
        lambda o: at(o, *POD, "containers").append(container("web")),
        "api-validation",
        f"{K8S_CORE} validateContainers",
    ),
    Pair(
        "container-name-not-dns-label",
        deployment(),
        _set(*WEB, "name", value="Web"),
        "api-validation",
        f"{K8S_CORE} validateContainers (IsDNS1123Label)",
    ),
    Pair(
        "duplicate-volume-name",
        deployment(),
        lambda o: at(o, *POD, "volumes").append({"name": "data", "emptyDir": {}}),
        "api-validation",
        f"{K8S_CORE} ValidateVolumes",
    ),
    Pair(
        "volume-with-two-sources",
        deployment(),
        _set(*POD, "volumes", 0, "hostPath", value={"path": "/data"}),
        "api-validation",
        f"{K8S_CORE} validateVolumeSource",
    ),
    Pair(
        "port-name-too-long",
        deployment(),
        _set(*WEB, "ports", 0, "name", value="metrics-exporter-http"),
        "api-validation",
        f"{APIMACHINERY} IsValidPortName",
    ),
    Pair(
        "quantity-does-not-parse",
        deployment(),
        _set(*WEB, "resources", "limits", "memory", value="1 GB"),
        "api-validation",
        "kubernetes/apimachinery pkg/api/resource/quantity.go ParseQuantity",
    ),
    Pair(
        "request-above-limit",
        deployment(),
        _set(*WEB, "resources", "requests", "cpu", value="2"),
        "api-validation",
        f"{K8S_CORE} ValidateResourceRequirements",
    ),
    Pair(
        "extended-resource-request-without-limit",
        deployment(),
        _set(*WEB, "resources", "requests", "nvidia.com/gpu", value=1),
        "api-validation",
        f"{K8S_CORE} ValidateResourceRequirements (IsOvercommitAllowed)",
    ),
    Pair(
        "extended-resource-request-not-limit",
        job(),
        _set(*JOB_POD, "containers", 0, "resources", "requests", value={"nvidia.com/gpu": 2}),
        "api-validation",
        f"{K8S_CORE} ValidateResourceRequirements",
    ),
    Pair(
        "hugepages-without-cpu-or-memory",
        job(),
        _set(*JOB_POD, "containers", 0, "resources", "limits", value={"hugepages-2Mi": "1Gi"}),
        "api-validation",
        f"{K8S_CORE} ValidateResourceRequirements",
    ),
    Pair(
        "liveness-success-threshold",
        deployment(),
        _set(*WEB, "livenessProbe", "successThreshold", value=2),
        "api-validation",
        f"{K8S_CORE} validateLivenessProbe",
    ),
    Pair(
        "probe-without-handler",
        deployment(),
        _set(*WEB, "readinessProbe", value={"periodSeconds": 5}),
        "api-validation",
        f"{K8S_CORE} validateHandler",
    ),
    Pair(
        "toleration-exists-with-value",
        deployment(),
        _set(*POD, "tolerations", 0, "value", value="present"),
        "api-validation",
        f"{K8S_CORE} ValidateTolerations",
    ),
    Pair(
        "toleration-seconds-without-noexecute",
        deployment(),
        _set(*POD, "tolerations", 0, "tolerationSeconds", value=60),
        "api-validation",
        f"{K8S_CORE} ValidateTolerations",
    ),
    Pair(
        "pod-restart-policy-unknown",
        deployment(),
        _set(*POD, "restartPolicy", value="Sometimes"),
        "api-validation",
        f"{K8S_CORE} validateRestartPolicy",
    ),
    Pair(
        "pod-dns-policy-unknown",
        deployment(),
        _set(*POD, "dnsPolicy", value="ClusterFirstWithHostNetwork"),
        "api-validation",
        f"{K8S_CORE} validateDNSPolicy",
    ),
    Pair(
        "pod-preemption-policy-unknown",
        deployment(),
        _set(*POD, "preemptionPolicy", value="PreemptLower"),
        "api-validation",
        f"{K8S_CORE} ValidatePreemptionPolicy",
    ),
    Pair(
        "pod-os-name-unknown",
        deployment(),
        _set(*POD, "os", value={"name": "Linux"}),
        "api-validation",
        f"{K8S_CORE} validateOS (validOS)",
    ),
    Pair(
        "pod-node-name-not-a-subdomain",
        deployment(),
        _set(*POD, "nodeName", value="gpu_node_1"),
        "api-validation",
        f"{K8S_CORE} ValidateNodeName",
    ),
    Pair(
        "pod-runtime-class-not-a-subdomain",
        deployment(),
        _set(*POD, "runtimeClassName", value="NVIDIA"),
        "api-validation",
        f"{K8S_CORE} ValidateRuntimeClassName",
    ),
    Pair(
        "pod-dns-option-without-name",
        deployment(),
        _set(*POD, "dnsConfig", value={"options": [{"value": "2"}]}),
        "api-validation",
        f"{K8S_CORE} validatePodDNSConfig",
    ),
    Pair(
        "pod-run-as-user-negative",
        deployment(),
        _set(*POD, "securityContext", value={"runAsUser": -1}),
        "api-validation",
        f"{APIMACHINERY} IsValidUserID",
    ),
    Pair(
        "container-run-as-group-too-large",
        deployment(),
        _set(*WEB, "securityContext", value={"runAsGroup": 4294967296}),
        "api-validation",
        f"{APIMACHINERY} IsValidGroupID",
    ),
    Pair(
        "node-affinity-operator-unknown",
        deployment(),
        _set(
            *POD,
            "affinity",
            value={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpu", "operator": "Equals"}]}
                        ]
                    }
                }
            },
        ),
        "api-validation",
        f"{K8S_CORE} validateNodeSelectorRequirement",
    ),
    Pair(
        "topology-spread-zero-skew",
        deployment(),
        _set(*POD, "topologySpreadConstraints", 0, "maxSkew", value=0),
        "api-validation",
        f"{K8S_CORE} validateTopologySpreadConstraints",
    ),
    Pair(
        "host-port-differs-under-host-network",
        deployment(),
        lambda o: (
            at(o, *POD).update(hostNetwork=True),
            at(o, *WEB, "ports", 0).update(hostPort=9090),
        ),
        "api-validation",
        f"{K8S_CORE} validateHostNetwork",
    ),
    Pair(
        "privileged-without-escalation",
        deployment(),
        _set(
            *WEB, "securityContext", value={"privileged": True, "allowPrivilegeEscalation": False}
        ),
        "api-validation",
        f"{K8S_CORE} ValidateSecurityContext",
    ),
    # --- workloads ------------------------------------------------------------------------
    Pair(
        "deployment-restart-policy",
        deployment(),
        _set(*POD, "restartPolicy", value="OnFailure"),
        "api-validation",
        f"{K8S_APPS} ValidatePodTemplateSpecForReplicaSet",
    ),
    Pair(
        "deployment-zero-surge-and-unavailable",
        deployment(),
        _set(
            "spec",
            "strategy",
            value={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}},
        ),
        "api-validation",
        f"{K8S_APPS} ValidateRollingUpdateDeployment",
    ),
    Pair(
        "deployment-recreate-with-rolling-update",
        deployment(),
        _set("spec", "strategy", value={"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}),
        "api-validation",
        f"{K8S_APPS} ValidateDeploymentStrategy",
    ),
    Pair(
        "job-restart-policy-defaults-to-always",
        job(),
        _delete(*JOB_POD, "restartPolicy"),
        "api-validation",
        f"{K8S_BATCH} validateJobSpec",
    ),
    Pair(
        "job-backoff-per-index-not-indexed",
        job(),
        _set("spec", "completionMode", value="NonIndexed"),
        "api-validation",
        f"{K8S_BATCH} validateJobSpec (backoffLimitPerIndex)",
    ),
    Pair(
        "job-indexed-without-completions",
        job(),
        _delete("spec", "completions"),
        "api-validation",
        f"{K8S_BATCH} validateJobSpec (completionMode)",
    ),
    Pair(
        "job-pod-failure-policy-needs-never",
        job(),
        lambda o: (
            o["spec"].update(
                podFailurePolicy={
                    "rules": [
                        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
                    ]
                }
            ),
            at(o, *JOB_POD).update(restartPolicy="OnFailure"),
        ),
        "api-validation",
        f"{K8S_BATCH} validateJobSpec (podFailurePolicy)",
    ),
    Pair(
        "job-exit-code-zero-in",
        job(),
        lambda o: o["spec"].update(
            podFailurePolicy={
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 42]}}
                ]
            }
        ),
        "api-validation",
        f"{K8S_BATCH} validatePodFailurePolicyRuleOnExitCodes",
    ),
    Pair(
        "job-name-too-long-for-label",
        job(),
        _set("metadata", "name", value="a" * 64),
        "api-validation",
        f"{K8S_BATCH} ValidateJob (job-name label of the pods)",
    ),
    Pair(
        "cronjob-schedule",
        simple(
            "CronJob",
            "batch/v1",
            {
                "spec": {
                    "schedule": "0 3 * * *",
                    "jobTemplate": {
                        "spec": {
                            "template": {
                                "spec": {"restartPolicy": "OnFailure", "containers": [container()]}
                            }
                        }
                    },
                }
            },
        ),
        _set("spec", "schedule", value="0 25 * * *"),
        "api-validation",
        f"{K8S_BATCH} validateScheduleFormat",
    ),
    Pair(
        "pdb-min-and-max",
        simple(
            "PodDisruptionBudget",
            "policy/v1",
            {"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
        ),
        _set("spec", "maxUnavailable", value=1),
        "api-validation",
        f"{K8S_POLICY} ValidatePodDisruptionBudgetSpec",
    ),
    Pair(
        "configmap-key",
        simple("ConfigMap", "v1", {"data": {"nccl.conf": "NCCL_DEBUG=WARN"}}),
        _set("data", value={"nccl conf": "NCCL_DEBUG=WARN"}),
        "api-validation",
        f"{K8S_CORE} ValidateConfigMap (IsConfigMapKey)",
    ),
    Pair(
        "secret-tls-keys",
        simple(
            "Secret",
            "v1",
            {"type": "kubernetes.io/tls", "stringData": {"tls.crt": "CERT", "tls.key": "KEY"}},
        ),
        _delete("stringData", "tls.key"),
        "api-validation",
        f"{K8S_CORE} ValidateSecret",
    ),
    # --- Training Operator (webhook at apply; templates when pods are created) --------------
    Pair(
        "pytorchjob-name-dns1035",
        pytorchjob(),
        _set("metadata", "name", value="llama.sft"),
        "webhook",
        f"{TRAINING_OPERATOR} validatePyTorchJob",
    ),
    Pair(
        "pytorchjob-two-masters",
        pytorchjob(),
        _set(*PT_MASTER, "replicas", value=2),
        "webhook",
        f"{TRAINING_OPERATOR} validatePyTorchReplicaSpecs",
    ),
    Pair(
        "pytorchjob-master-without-replicas",
        pytorchjob(),
        _delete(*PT_MASTER, "replicas"),
        "webhook",
        f"{TRAINING_OPERATOR} validatePyTorchReplicaSpecs",
    ),
    Pair(
        "pytorchjob-container-name",
        pytorchjob(),
        _set(*PT_POD, "containers", 0, "name", value="trainer"),
        "webhook",
        f"{TRAINING_OPERATOR} validatePyTorchReplicaSpecs",
    ),
    Pair(
        "pytorchjob-elastic-without-worker",
        pytorchjob(),
        lambda o: (
            o["spec"].update(elasticPolicy={"minReplicas": 1, "maxReplicas": 2}),
            o["spec"]["pytorchReplicaSpecs"].pop("Worker"),
        ),
        "webhook",
        f"{TRAINING_OPERATOR} validateSpec",
    ),
    Pair(
        "pytorchjob-template-mount",
        pytorchjob(),
        _set(
            *PT_POD,
            "containers",
            0,
            "volumeMounts",
            value=[{"name": "dshm", "mountPath": "/dev/shm"}],
        ),
        "api-validation",
        f"{K8S_CORE} ValidateVolumeMounts (when the operator creates the pods)",
    ),
    Pair(
        "pytorchjob-queue-label",
        pytorchjob(),
        _set("metadata", "labels", "kueue.x-k8s.io/queue-name", value="Training_Queue"),
        "webhook",
        f"{KUEUE} pkg/controller/jobframework/validation.go ValidateQueueName",
    ),
    # --- MPI Operator v2 ------------------------------------------------------------------
    Pair(
        "mpijob-two-launchers",
        mpijob(),
        _set("spec", "mpiReplicaSpecs", "Launcher", "replicas", value=2),
        "webhook",
        f"{MPI_OPERATOR} validateLauncherReplicaSpec",
    ),
    Pair(
        "mpijob-exitcode-restart-policy",
        mpijob(),
        _set("spec", "mpiReplicaSpecs", "Worker", "restartPolicy", value="ExitCode"),
        "webhook",
        f"{MPI_OPERATOR} validateReplicaSpec",
    ),
    Pair(
        "mpijob-worker-hostname-too-long",
        mpijob(),
        _set("metadata", "name", value="n" * 60),
        "webhook",
        f"{MPI_OPERATOR} validateMPIJobName",
    ),
    Pair(
        "mpijob-worker-replicas-zero",
        mpijob(),
        _set("spec", "mpiReplicaSpecs", "Worker", "replicas", value=0),
        "webhook",
        f"{MPI_OPERATOR} validateWorkerReplicaSpec",
    ),
    # --- Trainer v2 -----------------------------------------------------------------------
    Pair(
        "trainjob-name-rfc1035",
        trainjob(),
        _set("metadata", "name", value="llama-7b.v2"),
        "cel",
        f"{TRAINER} TrainJob CRD x-kubernetes-validations (metadata.name)",
    ),
    Pair(
        "trainjob-storage-uri",
        trainjob(),
        _set("spec", "initializer", "dataset", "storageUri", value="tatsu-lab/alpaca"),
        "cel",
        f"{TRAINER} TrainJob CRD x-kubernetes-validations (storageUri)",
    ),
    Pair(
        "trainjob-managed-by",
        trainjob(),
        _set("spec", "managedBy", value="example.com/ctl"),
        "cel",
        f"{TRAINER} TrainJob CRD x-kubernetes-validations (managedBy)",
    ),
    Pair(
        "runtime-two-ml-policies",
        runtime(),
        _set("spec", "mlPolicy", "mpi", value={}),
        "cel",
        f"{TRAINER} TrainingRuntime CRD x-kubernetes-validations (mlPolicy)",
    ),
    Pair(
        "runtime-ancestor-container",
        runtime(),
        _set(
            *RUNTIME_JOB,
            "template",
            "spec",
            "template",
            "spec",
            "containers",
            0,
            "name",
            value="trainer",
        ),
        "webhook",
        f"{TRAINER} pkg/webhooks/trainingruntime_webhook.go validateReplicatedJobs",
    ),
    Pair(
        "runtime-ancestor-replicas",
        runtime(),
        _set(*RUNTIME_JOB, "replicas", value=2),
        "webhook",
        f"{TRAINER} pkg/webhooks/trainingruntime_webhook.go validateReplicatedJobs",
    ),
    Pair(
        "runtime-env-injection-node",
        runtime(),
        _set(
            "spec",
            "mlPolicy",
            "torch",
            "envInjection",
            value={"targets": [{"jobName": "node", "containerNames": ["node"]}]},
        ),
        "cel",
        f"{TRAINER} TrainingRuntime CRD x-kubernetes-validations (envInjection)",
    ),
    # --- JobSet ---------------------------------------------------------------------------
    Pair(
        "jobset-first-depends-on",
        jobset(),
        _set(
            "spec", "replicatedJobs", 0, "dependsOn", value=[{"name": "workers", "status": "Ready"}]
        ),
        "webhook",
        f"{JOBSET} ValidateCreate (DependsOn)",
    ),
    Pair(
        "jobset-unknown-success-target",
        jobset(),
        _set("spec", "successPolicy", "targetReplicatedJobs", value=["driver"]),
        "webhook",
        f"{JOBSET} ValidateCreate (successPolicy)",
    ),
    Pair(
        "jobset-job-names-too-long",
        jobset(),
        _set("metadata", "name", value="p" * 56),
        "webhook",
        f"{JOBSET} ValidateCreate (GenJobName)",
    ),
    Pair(
        "jobset-failure-reason",
        jobset(),
        _set("spec", "failurePolicy", "rules", 0, "onJobFailureReasons", value=["OOMKilled"]),
        "webhook",
        f"{JOBSET} validateFailurePolicy",
    ),
    Pair(
        "jobset-startup-order-with-depends-on",
        jobset(),
        lambda o: (
            o["spec"].update(startupPolicy={"startupPolicyOrder": "InOrder"}),
            o["spec"]["replicatedJobs"][1].update(
                dependsOn=[{"name": "leader", "status": "Ready"}]
            ),
        ),
        "cel",
        "kubernetes-sigs/jobset v0.12.0 JobSet CRD x-kubernetes-validations (spec)",
    ),
    # --- Kueue ----------------------------------------------------------------------------
    Pair(
        "clusterqueue-fewer-resources-than-covered",
        cluster_queue(),
        lambda o: at(o, *CQ_GROUP, "flavors", 0, "resources").pop(),
        "cel",
        f"{KUEUE} ClusterQueue CRD x-kubernetes-validations (resourceGroups)",
    ),
    Pair(
        "clusterqueue-resource-order",
        cluster_queue(),
        _set(*CQ_GROUP, "flavors", 0, "resources", 0, "name", value="memory"),
        "webhook",
        f"{KUEUE} pkg/webhooks/clusterqueue_webhook.go validateFlavorQuotas",
    ),
    Pair(
        "clusterqueue-borrowing-without-cohort",
        cluster_queue(),
        _set(*CQ_GROUP, "flavors", 0, "resources", 2, "lendingLimit", value=4),
        "webhook",
        f"{KUEUE} pkg/webhooks/clusterqueue_webhook.go validateLimit",
    ),
    Pair(
        "resourceflavor-toleration-operator",
        resource_flavor(),
        _set("spec", "tolerations", 0, "value", value="yes"),
        "cel",
        f"{KUEUE} ResourceFlavor CRD x-kubernetes-validations (tolerations)",
    ),
    Pair(
        "resourceflavor-node-label",
        resource_flavor(),
        _set("spec", "nodeLabels", value={"nvidia.com/gpu.product": "NVIDIA H100"}),
        "webhook",
        f"{KUEUE} pkg/webhooks/resourceflavor_webhook.go ValidateResourceFlavor",
    ),
    Pair(
        "topology-hostname-not-lowest",
        topology(),
        lambda o: o["spec"]["levels"].reverse(),
        "cel",
        f"{KUEUE} Topology CRD x-kubernetes-validations (levels)",
    ),
]
