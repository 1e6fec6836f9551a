"""ValidatingAdmissionPolicies evaluated offline with the real CEL runtime, against the
semantics of the API server's admission (the API server itself cannot run here): matching,
parameters, variables, messages, failure policies and validation actions; and the policy
trainops generates for a cluster, on the runs new-run writes and on runs it must refuse."""

from __future__ import annotations

import copy

import pytest

from trainops.admission.vap import PolicySet, guess_resource
from trainops.profile import admission, overlay, tenancy
from trainops.profile.model import parse_profile

JOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "llama", "namespace": "vision", "labels": {"team": "vision"}},
    "spec": {},
}


def policy(validations, **spec) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["kubeflow.org"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pytorchjobs"],
                    }
                ]
            },
            "validations": validations,
            **spec,
        },
    }


def binding(**spec) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny"], **spec},
    }


def params(name: str, namespace: str, **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kind": "team"}},
        "data": data,
    }


def denials(docs, obj=JOB):
    return [d.message for d in PolicySet(docs).denials(copy.deepcopy(obj))]


def test_message_expression_then_message_then_the_expression():
    failing = "object.metadata.name == 'other'"
    assert denials(
        [
            policy(
                [{"expression": failing, "messageExpression": "'name ' + object.metadata.name"}]
            ),
            binding(),
        ]
    ) == ["name llama"]
    # A message expression that errors or is empty gives way to the message.
    assert denials(
        [
            policy([{"expression": failing, "message": "static", "messageExpression": "''"}]),
            binding(),
        ]
    ) == ["static"]
    assert denials([policy([{"expression": failing}]), binding()]) == [
        f"failed expression: {failing}"
    ]
    full = PolicySet([policy([{"expression": failing}]), binding()]).denials(JOB)[0].text
    assert full.startswith("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: ")


def test_rules_match_group_version_resource_and_operation():
    always_false = [{"expression": "false", "message": "no"}]
    docs = [policy(always_false), binding()]
    assert denials(docs) == ["no"]
    assert denials(docs, {**JOB, "kind": "MPIJob"}) == []  # resource mpijobs
    assert denials(docs, {**JOB, "apiVersion": "other.org/v1"}) == []
    assert PolicySet(docs).denials(JOB, operation="DELETE") == []
    excluded = policy(
        always_false,
        matchConstraints={
            "resourceRules": policy([])["spec"]["matchConstraints"]["resourceRules"],
            "excludeResourceRules": [
                {
                    "apiGroups": ["*"],
                    "apiVersions": ["*"],
                    "operations": ["*"],
                    "resources": ["pytorchjobs"],
                    "resourceNames": ["llama"],
                }
            ],
        },
    )
    assert denials([excluded, binding()]) == []
    assert guess_resource("NetworkPolicy") == "networkpolicies"
    assert guess_resource("Ingress") == "ingresses"


def test_bindings_select_namespaces_by_their_labels_and_name():
    docs = [policy([{"expression": "false", "message": "no"}])]
    selector = {"namespaceSelector": {"matchLabels": {"tier": "teams"}}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}}
    assert denials([*docs, binding(matchResources=selector), namespace]) == []
    labelled = copy.deepcopy(namespace)
    labelled["metadata"]["labels"] = {"tier": "teams"}
    assert denials([*docs, binding(matchResources=selector), labelled]) == ["no"]
    # Every namespace carries kubernetes.io/metadata.name, set by the API server.
    by_name = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "vision"}}}
    assert denials([*docs, binding(matchResources=by_name)]) == ["no"]
    # An object selector narrows further; a binding without rules narrows nothing else.
    objects = {"objectSelector": {"matchLabels": {"team": "nlp"}}}
    assert denials([*docs, binding(matchResources=objects)]) == []


def test_params_in_the_requests_namespace_by_name_or_selector_and_when_missing():
    check = [
        {
            "expression": "object.metadata.labels.team == params.data.team",
            "messageExpression": "'team ' + params.data.team",
        }
    ]
    parameterised = policy(check, paramKind={"apiVersion": "v1", "kind": "ConfigMap"})
    by_name = binding(paramRef={"name": "owner", "parameterNotFoundAction": "Deny"})
    assert denials([parameterised, by_name, params("owner", "vision", team="vision")]) == []
    assert denials([parameterised, by_name, params("owner", "vision", team="nlp")]) == ["team nlp"]
    # Another namespace's parameters are not this request's.
    assert denials([parameterised, by_name, params("owner", "nlp", team="vision")]) == [
        "no params found for policy binding with `owner`"
    ]
    allow = binding(paramRef={"name": "owner", "parameterNotFoundAction": "Allow"})
    assert denials([parameterised, allow]) == []
    selected = binding(
        paramRef={"selector": {"matchLabels": {"kind": "team"}}, "parameterNotFoundAction": "Deny"}
    )
    both = [params("a", "vision", team="vision"), params("b", "vision", team="nlp")]
    assert denials([parameterised, selected, *both]) == ["team nlp"]  # each param set judged


def test_variables_conditions_and_failure_policies():
    variables = [
        {"name": "labels", "expression": "object.metadata.labels"},
        {"name": "team", "expression": "variables.labels.team"},
        {"name": "broken", "expression": "object.spec.missing.field"},
    ]
    fine = {"expression": "variables.team == 'vision'", "message": "team"}
    reads_broken = {"expression": "variables.broken == 1", "message": "broken"}
    docs = [policy([fine], variables=variables), binding()]
    assert denials(docs) == []  # a failing variable no validation reads is harmless
    docs = [policy([fine, reads_broken], variables=variables), binding()]
    [message] = denials(docs)
    assert "object.spec.missing.field" in message and "resulted in error" in message
    ignored = policy([fine, reads_broken], variables=variables, failurePolicy="Ignore")
    assert denials([ignored, binding()]) == []
    skip = policy(
        [{"expression": "false", "message": "no"}],
        matchConditions=[
            {"name": "only-nlp", "expression": "object.metadata.labels.team == 'nlp'"}
        ],
    )
    assert denials([skip, binding()]) == []


def test_validation_actions_say_what_a_denial_is():
    docs = [policy([{"expression": "false", "message": "no"}]), binding(validationActions=["Warn"])]
    [denial] = PolicySet(docs).denials(JOB)
    assert denial.actions == ("Warn",)


def test_a_policy_using_an_api_server_only_library_is_reported_not_passed():
    docs = [
        policy([{"expression": "authorizer.requestResource.check('create').allowed()"}]),
        binding(),
    ]
    policies = PolicySet(docs)
    assert "p" in policies.problems and "cannot be compiled here" in policies.problems["p"]
    assert not policies  # not evaluated, and said so


# -- the policy trainops generates ----------------------------------------------------------


def cluster(scheduler: str, **settings):
    return parse_profile(
        {
            **settings,
            "fabric": "roce",
            "rdmaResource": "nvidia.com/roce_vf",
            "gpusPerNode": 8,
            "nodes": 8,
            "image": "ghcr.io/example-org/trainer:1.0.0",
            "storageClass": "cephfs",
            "scheduler": scheduler,
            "trainer": "both",
            "teams": [
                {"name": "vision", "gpus": 32, "priorities": ["best-effort", "standard"]},
                {"name": "nlp", "gpus": 16},
            ],
        },
        "east",
    )


def platform(profile) -> list[dict]:
    docs = admission.documents(profile, overlay.job_controllers(profile))
    for team in profile.teams:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": team.name, "labels": {tenancy.TENANT_LABEL: team.name}},
            }
        )
        docs.append(tenancy.params(profile, team.namespace, team))
    return docs


def team_job(scheduler: str, **change) -> dict:
    pod = {
        "metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "training-net"}},
        "spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/example-org/trainer:1.0.0"}]},
    }
    labels = {tenancy.TEAM_LABEL: "vision"}
    spec: dict = {"pytorchReplicaSpecs": {"Master": {"template": pod}, "Worker": {"template": pod}}}
    if scheduler == "kueue":
        labels.update({tenancy.QUEUE_LABEL: "vision", tenancy.PRIORITY_LABEL: "standard"})
    else:
        spec["runPolicy"] = {"schedulingPolicy": {"queue": "vision", "priorityClass": "standard"}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "vit", "namespace": "vision", "labels": labels},
        "spec": spec,
    }
    job = copy.deepcopy(job)
    for path, value in change.items():
        node = job
        *steps, last = path.split("__")
        for step in steps:
            node = node[step]
        node[last] = value
    return job


def team_trainjob(scheduler: str, **spec) -> dict:
    """Team vision's TrainJob on the cluster's torch runtime, queued as `scheduler` wants it
    (Kueue's labels; Volcano names its queue in a runtime patch, which `spec` may add)."""
    labels = {tenancy.TEAM_LABEL: "vision"}
    if scheduler == "kueue":
        labels.update({tenancy.QUEUE_LABEL: "vision", tenancy.PRIORITY_LABEL: "standard"})
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bert", "namespace": "vision", "labels": labels},
        "spec": {"runtimeRef": {"name": "torch-distributed-roce"}, **spec},
    }


def _pods(job: dict) -> list[dict]:
    return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


@pytest.mark.parametrize("scheduler", ["kueue", "volcano"])
def test_the_generated_policy_admits_a_team_run_and_refuses_reaching_outside_it(scheduler):
    profile = cluster(scheduler)
    docs = platform(profile)
    assert PolicySet(docs).problems == {}
    assert denials(docs, team_job(scheduler)) == []
    other_namespace = team_job(scheduler, metadata__namespace="nlp")
    assert denials(docs, other_namespace) == [
        "namespace nlp belongs to team nlp: its jobs carry the label trainops.dev/team: nlp"
    ]
    if scheduler == "kueue":
        queue = team_job(scheduler, metadata__labels={
            tenancy.TEAM_LABEL: "vision", tenancy.QUEUE_LABEL: "nlp",
            tenancy.PRIORITY_LABEL: "standard"})  # fmt: skip
        urgent = team_job(scheduler, metadata__labels={
            tenancy.TEAM_LABEL: "vision", tenancy.QUEUE_LABEL: "vision",
            tenancy.PRIORITY_LABEL: "urgent"})  # fmt: skip
    else:
        queue = team_job(scheduler)
        queue["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = "nlp"
        urgent = team_job(scheduler)
        urgent["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] = "urgent"
    assert [m for m in denials(docs, queue) if "queue in" in m], denials(docs, queue)
    assert [m for m in denials(docs, urgent) if "priorities best-effort,standard" in m]
    network = team_job(scheduler)
    _pods(network)[1]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = (
        "training-net, kube-system/host-net"
    )
    assert denials(docs, network) == [
        "pods attach only the approved networks training-net,vision/training-net"
    ]
    registry = team_job(scheduler)
    _pods(registry)[0]["spec"]["containers"][0]["image"] = "docker.io/someone/miner:1"
    assert denials(docs, registry) == ["images come from ghcr.io/example-org/"]
    privileged = team_job(scheduler)
    _pods(privileged)[0]["spec"]["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["IPC_LOCK", "SYS_ADMIN"]}
    }
    [message] = denials(docs, privileged)
    assert message.startswith("training pods take no privilege")


def test_a_volcano_team_trainjob_must_name_its_queue_in_a_runtime_patch():
    profile = cluster("volcano")
    docs = platform(profile)
    trainjob = team_trainjob("volcano", trainer={"numNodes": 2})
    assert denials(docs, trainjob) == ["jobs in namespace vision queue in Volcano queue vision"]
    patched = copy.deepcopy(trainjob)
    patched["spec"]["runtimePatches"] = [
        {
            "manager": "trainops.dev/team",
            "trainingRuntimeSpec": {
                "template": {
                    "metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "vision"}}
                }
            },
        }
    ]
    assert denials(docs, patched) == []


def _patch(pod_spec: dict) -> list[dict]:
    job = {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}
    return [
        {
            "manager": "example.com/someone",
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
        }
    ]


ALL_GPUS = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


@pytest.mark.parametrize(
    ("path", "value", "denied"),
    [
        (("trainer", "env"), ALL_GPUS, "containers get GPUs"),
        (("initializer", "dataset", "env"), ALL_GPUS, "containers get GPUs"),
        (("initializer", "model", "env"), ALL_GPUS, "containers get GPUs"),
        (
            ("runtimePatches",),
            _patch({"containers": [{"name": "node", "env": ALL_GPUS}]}),
            "containers get GPUs",
        ),
        (
            ("runtimePatches",),
            _patch({"initContainers": [{"name": "init", "securityContext": {"privileged": True}}]}),
            "training pods take no privilege",
        ),
        (
            ("runtimePatches",),
            _patch({"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}),
            "training pods take no privilege",
        ),
    ],
)
def test_what_a_trainjob_sets_on_its_runtimes_pods_is_checked(path, value, denied):
    # A TrainJob's pods come from the runtime, made by the JobSet and Job controllers (which
    # the policy skips): the trainer's variables and the runtime patches are checked on it.
    docs = platform(cluster("kueue"))
    trainjob = team_trainjob("kueue", trainer={"numNodes": 2})
    assert denials(docs, trainjob) == []
    node = trainjob["spec"]
    for step in path[:-1]:
        node = node.setdefault(step, {})
    node[path[-1]] = value
    [message] = denials(docs, trainjob)
    assert message.startswith(denied), message


@pytest.mark.parametrize(
    ("volume", "denied"),
    [
        ({"nfs": {"server": "10.0.0.9", "path": "/exports/nlp"}}, "training pods mount storage"),
        ({"csi": {"driver": "example.csi.io"}}, "training pods mount storage"),
        ({"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "x", "lun": 0}}, "training pods"),
        ({"projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}, "training pods"),
        ({"image": {"reference": "docker.io/someone/weights:1"}}, "images come from"),
    ],
)
def test_team_pods_mount_only_claims_config_and_approved_images(volume, denied):
    docs = platform(cluster("kueue"))
    allowed = [
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "cfg", "projected": {"sources": [{"configMap": {"name": "c"}}]}},
        {"name": "weights", "image": {"reference": "ghcr.io/example-org/weights:1"}},
    ]
    job = team_job("kueue")
    _pods(job)[0]["spec"]["volumes"] = allowed
    assert denials(docs, job) == []
    _pods(job)[0]["spec"]["volumes"] = [*allowed, {"name": "extra", **volume}]
    [message] = denials(docs, job)
    assert message.startswith(denied), message


@pytest.mark.parametrize(
    ("change", "denied"),
    [
        ({"nodeName": "gpu-node-7"}, True),
        ({"tolerations": [{"operator": "Exists"}]}, True),
        ({"tolerations": [{"key": "", "operator": "Exists", "effect": "NoSchedule"}]}, True),
        ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, False),
        ({"tolerations": [{"key": "dedicated", "value": "training"}]}, False),
    ],
)
def test_the_scheduler_places_team_pods(change, denied):
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    _pods(job)[1]["spec"].update(change)
    refused = [m for m in denials(docs, job) if m.startswith("training pods are placed")]
    assert bool(refused) is denied, denials(docs, job)


@pytest.mark.parametrize(
    ("change", "denied"),
    [
        ({"serviceAccountName": "vit-launcher"}, True),
        ({"serviceAccount": "vit-launcher"}, True),
        ({"automountServiceAccountToken": True}, True),
        ({"serviceAccountName": "default", "automountServiceAccountToken": False}, False),
    ],
)
def test_team_pods_keep_the_default_account_without_its_token(change, denied):
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    _pods(job)[1]["spec"].update(change)
    refused = [m for m in denials(docs, job) if m.startswith("training pods run as the")]
    assert bool(refused) is denied, denials(docs, job)


@pytest.mark.parametrize(
    ("scheduler", "name", "denied"),
    [
        ("volcano", "default-scheduler", True),
        ("volcano", "volcano", False),
        ("kueue", "my-scheduler", True),
        ("kueue", "default-scheduler", False),
    ],
)
def test_team_pods_use_the_scheduler_the_queue_works_with(scheduler, name, denied):
    docs = platform(cluster(scheduler))
    job = team_job(scheduler)
    for pod in _pods(job):
        pod["spec"]["schedulerName"] = name
    refused = [m for m in denials(docs, job) if m.startswith("training pods are scheduled by")]
    assert bool(refused) is denied, denials(docs, job)


@pytest.mark.parametrize(
    ("labels", "spec", "denied"),
    [
        ({"jobset.sigs.k8s.io/jobset-name": "llama-1124"}, {}, True),
        ({"training.kubeflow.org/job-name": "llama-1124"}, {}, True),
        ({"job-name": "llama-1124"}, {}, True),
        ({}, {"hostname": "llama-1124-node-0-0", "subdomain": "llama-1124"}, True),
        ({"app": "vit"}, {}, False),
    ],
)
def test_team_pods_take_their_identity_from_their_controller(labels, spec, denied):
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    _pods(job)[1]["metadata"]["labels"] = labels
    _pods(job)[1]["spec"].update(spec)
    refused = [m for m in denials(docs, job) if m.startswith("training pods take their identity")]
    assert bool(refused) is denied, denials(docs, job)


@pytest.mark.parametrize(("seconds", "denied"), [(300, False), (900, False), (31536000, True)])
def test_team_pods_give_back_their_gpus_within_a_bounded_grace_period(seconds, denied):
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    _pods(job)[1]["spec"]["terminationGracePeriodSeconds"] = seconds
    refused = [m for m in denials(docs, job) if m.startswith("training pods give back")]
    assert bool(refused) is denied, denials(docs, job)


JOB_NAME = {
    "name": "TRAINER_JOB_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/job-name']"}},
}


def _job_name_from(label: str) -> dict:
    path = f"metadata.labels['{label}']"
    return {"name": "TRAINER_JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": path}}}


OWN_MOUNT = {"name": "ckpt", "mountPath": "/checkpoints", "subPathExpr": "$(TRAINER_JOB_NAME)"}


@pytest.mark.parametrize(
    ("mount", "env", "denied"),
    [
        (OWN_MOUNT, [JOB_NAME], False),
        ({"name": "ckpt", "mountPath": "/data"}, [JOB_NAME], True),  # every run's directory
        ({**OWN_MOUNT, "subPathExpr": None, "subPath": "llama-1124"}, [JOB_NAME], True),
        ({**OWN_MOUNT, "subPathExpr": "$(TRAINER_JOB_NAME)/.."}, [JOB_NAME], True),
        (OWN_MOUNT, [{"name": "TRAINER_JOB_NAME", "value": "llama-1124"}], True),
        (OWN_MOUNT, [JOB_NAME, {"name": "TRAINER_JOB_NAME", "value": "llama-1124"}], True),
        (OWN_MOUNT, [], True),
        # Another kind's label: the pod has none of it, the name reads "" and the whole
        # claim is mounted (round 7 of the attack).
        (OWN_MOUNT, [_job_name_from("jobset.sigs.k8s.io/jobset-name")], True),
        (OWN_MOUNT, [_job_name_from("batch.kubernetes.io/job-name")], True),
    ],
)
def test_a_team_pod_mounts_only_its_own_checkpoint_directory(mount, env, denied):
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    mount = {k: v for k, v in mount.items() if v is not None}
    spec = _pods(job)[1]["spec"]
    spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}]
    spec["containers"] = [{**spec["containers"][0], "volumeMounts": [mount], "env": env}]
    refused = [m for m in denials(docs, job) if m.startswith("a run sees its own checkpoints")]
    assert bool(refused) is denied, denials(docs, job)


@pytest.mark.parametrize(
    "change",
    [
        {"trainer": {"env": [{"name": "TRAINER_JOB_NAME", "value": "llama-1124"}]}},
        {"runtimePatches": _patch({"containers": [{"name": "node", "env": [JOB_NAME]}]})},
        # A volume of the claim in one patch, mounted by another patch's container.
        {
            "runtimePatches": _patch(
                {
                    "volumes": [
                        {"name": "all", "persistentVolumeClaim": {"claimName": "checkpoints"}}
                    ]
                }
            )
            + _patch(
                {
                    "containers": [
                        {"name": "node", "volumeMounts": [{"name": "all", "mountPath": "/a"}]}
                    ]
                }
            )
        },
        {
            "runtimePatches": _patch(
                {
                    "containers": [
                        {
                            "name": "node",
                            "volumeMounts": [{"name": "checkpoints", "mountPath": "/all"}],
                        }
                    ]
                }
            )
        },
    ],
)
def test_a_trainjob_leaves_its_checkpoint_directory_to_the_runtime(change):
    docs = platform(cluster("kueue"))
    trainjob = team_trainjob("kueue", **change)
    assert [m for m in denials(docs, trainjob) if m.startswith("a run sees its own checkpoints")]


@pytest.mark.parametrize(("scheduler", "denied"), [("kueue", True), ("volcano", False)])
def test_on_kueue_a_team_pod_takes_its_priority_from_the_queue(scheduler, denied):
    docs = platform(cluster(scheduler))
    job = team_job(scheduler)
    _pods(job)[1]["spec"]["priorityClassName"] = "system-node-critical"
    refused = [m for m in denials(docs, job) if "no priorityClassName" in m]
    assert bool(refused) is denied, denials(docs, job)


@pytest.mark.parametrize("scheduler", ["default", "kueue", "volcano"])
def test_no_pod_takes_a_system_priority_on_any_scheduler(scheduler):
    """system-node-critical lets kube-scheduler evict any pod on the node (round 9 of the
    attack: a run on a cluster without a queue preempted another run's workers)."""
    if scheduler == "default":
        raw = {"fabric": "tcp", "nic": "eth1", "gpusPerNode": 8, "nodes": 2,
               "storageClass": "cephfs", "image": "ghcr.io/example-org/trainer:1.0.0"}  # fmt: skip
        profile = parse_profile(raw, "lab")
        docs = admission.documents(profile, overlay.job_controllers(profile))
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": "vision", "labels": {tenancy.TENANT_LABEL: "training"}}})  # fmt: skip
        docs.append(tenancy.params(profile, "vision", None))
        job = team_job(scheduler)
        job["metadata"]["labels"] = {}
        _pods(job)[0]["metadata"]["annotations"] = {}
        _pods(job)[1]["metadata"]["annotations"] = {}
        del job["spec"]["runPolicy"]
    else:
        docs = platform(cluster(scheduler))
        job = team_job(scheduler)
    assert PolicySet(docs).problems == {}
    assert denials(docs, job) == []
    if scheduler == "volcano":
        _pods(job)[1]["spec"]["priorityClassName"] = "standard"
        assert denials(docs, job) == []
    _pods(job)[1]["spec"]["priorityClassName"] = "system-node-critical"
    [message] = denials(docs, job)
    assert "priorityClassName" in message and "preempt" in message, message


def _owned(kind: str) -> list[dict]:
    return [
        {
            "apiVersion": "batch/v1",
            "kind": kind,
            "name": "nightly",
            "uid": "0c6b0a44-5a3f-4f53-9a3e-6b9d0f0c2a11",
            "controller": True,
        }
    ]


GPU_JOB_OF_ANY_REGISTRY = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "nightly-123",
        "namespace": "vision",
        "ownerReferences": _owned("CronJob"),
    },
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "m",
                        "image": "docker.io/someone/miner:1",
                        "resources": {"limits": {"nvidia.com/gpu": 8}},
                    }
                ]
            }
        }
    },
}


@pytest.mark.parametrize(
    ("user", "skipped"),
    [
        ("system:serviceaccount:kube-system:cronjob-controller", True),
        ("system:kube-controller-manager", True),
        # A person, Argo CD, a team's CI: an owner reference anyone can write proves nothing.
        ("alice@example.com", False),
        ("system:serviceaccount:argocd:argocd-application-controller", False),
        ("system:serviceaccount:vision:ci", False),
    ],
)
def test_an_owner_reference_skips_the_policy_only_for_a_job_controllers_request(user, skipped):
    """Mocked API server request: the user a request comes from cannot exist offline."""
    docs = platform(cluster("kueue"))
    found = [
        d.message
        for d in PolicySet(docs).denials(copy.deepcopy(GPU_JOB_OF_ANY_REGISTRY), user=user)
    ]
    assert (found == []) == skipped, found


@pytest.mark.parametrize("directory", sorted(overlay.OPERATOR_CONTROLLERS))
def test_the_controllers_the_policy_trusts_are_the_installs_service_accounts(directory):
    """Each operator's trusted user is its Deployment's service account, as the pinned
    install renders it (namespace and name prefixes included)."""
    import subprocess
    import sys

    import yaml

    from tests.support import REPO

    rendered = subprocess.run(
        [sys.executable, "-m", "trainops", "render", "--no-cache", f"base/operators/{directory}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    accounts = {
        f"system:serviceaccount:{d['metadata']['namespace']}:"
        f"{d['spec']['template']['spec']['serviceAccountName']}"
        for d in yaml.safe_load_all(rendered)
        if d and d.get("kind") == "Deployment"
    }
    namespace = overlay.OPERATOR_NAMESPACES[directory]
    trusted = f"system:serviceaccount:{namespace}:{overlay.OPERATOR_CONTROLLERS[directory]}"
    assert trusted in accounts, accounts


def _network_policy(spec: dict, namespace: str = "vision") -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "vit", "namespace": namespace},
        "spec": spec,
    }


JOB_PODS = {"matchLabels": {"training.kubeflow.org/job-name": "vit"}}
OTHER_PODS = {"matchLabels": {"training.kubeflow.org/job-name": "llama"}}


@pytest.mark.parametrize(
    "spec, denied",
    [
        # What the templates and new-run write, for either kind of job label.
        (tenancy.job_network_policy("PyTorchJob", "vit")["spec"], False),
        (tenancy.job_network_policy("TrainJob", "vit")["spec"], False),
        # The namespace's own: only the metrics port, to all.
        (tenancy.jobs_apart("vision")["spec"], False),
        ({"podSelector": JOB_PODS, "policyTypes": ["Ingress"]}, False),  # admits nothing
        # Reopening a job: to another job's pods, every pod, another namespace, addresses.
        ({"podSelector": JOB_PODS, "ingress": [{"from": [{"podSelector": OTHER_PODS}]}]}, True),
        ({"podSelector": JOB_PODS, "ingress": [{}]}, True),
        ({"podSelector": {}, "ingress": [{"from": [{"podSelector": OTHER_PODS}]}]}, True),
        (
            {
                "podSelector": JOB_PODS,
                "ingress": [{"from": [{"podSelector": JOB_PODS, "namespaceSelector": {}}]}],
            },
            True,
        ),
        ({"podSelector": JOB_PODS, "ingress": [{"from": [{"ipBlock": {"cidr": "0/0"}}]}]}, True),
        (
            {
                "podSelector": {"matchLabels": {"app": "x"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "x"}}}]}],
            },
            True,
        ),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 29500}]}]}, True),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": "metrics", "endPort": 9}]}]}, True),
        # Isolating egress cuts the selected pods off.
        ({"podSelector": {}, "policyTypes": ["Egress"]}, True),
        ({"podSelector": JOB_PODS, "egress": [{"to": [{"podSelector": JOB_PODS}]}]}, True),
    ],
)
def test_a_network_policy_in_a_team_namespace_opens_a_job_to_itself_alone(spec, denied):
    docs = platform(cluster("kueue"))
    assert bool(denials(docs, _network_policy(spec))) is denied
    # Outside the tenant namespaces the platform makes no claim.
    assert denials(docs, _network_policy(spec, namespace="kube-system")) == []


VICTIM = {"training.kubeflow.org/job-name": "moe-mpi-1124"}


@pytest.mark.parametrize(
    "patch",
    [
        # On the pod template, a replicated job, or the JobSet: JobSet copies each onto pods.
        [{"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"metadata": {"labels": VICTIM}}}}}
        ]}}}}],
        [{"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"metadata": {"labels": VICTIM}}}
        ]}}}}],
        [{"trainingRuntimeSpec": {"template": {"metadata": {"labels": VICTIM}}}}],
        _patch({"subdomain": "moe-mpi-1124", "hostname": "moe-mpi-1124-worker-0"}),
    ],
)  # fmt: skip
def test_a_trainjobs_runtime_patches_take_no_other_jobs_identity(patch):
    """Labels of another job's controller put a run's pods behind that job's service and
    inside its NetworkPolicy (round 6 of the attack: a shell in another run's workers)."""
    docs = platform(cluster("kueue"))
    assert denials(docs, team_trainjob("kueue")) == []
    [message] = denials(docs, team_trainjob("kueue", runtimePatches=patch))
    assert message.startswith("training pods take their identity from their controller")


SECRET_VOLUME = {"name": "key", "secret": {"secretName": "moe-mpi-1124-ssh"}}


@pytest.mark.parametrize(
    "spec",
    [
        {"volumes": [SECRET_VOLUME]},
        {"volumes": [{"name": "k", "projected": {"sources": [{"secret": {"name": "b-ssh"}}]}}]},
        {"containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "bert-mpi-ssh-auth"}}]}]},
        {"containers": [{"name": "c", "env": [{"name": "K", "valueFrom": {"secretKeyRef": {
            "name": "moe-mpi-1124-ssh", "key": "ssh-privatekey"}}}]}]},
    ],
)  # fmt: skip
def test_team_pods_read_no_jobs_ssh_key(spec):
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    allowed = {"name": "hf", "secret": {"secretName": "hf-token"}}
    _pods(job)[1]["spec"]["volumes"] = [allowed]
    assert denials(docs, job) == []
    for key, value in spec.items():
        _pods(job)[1]["spec"][key] = (
            value
            if key != "containers"
            else [{**_pods(job)[1]["spec"]["containers"][0], **value[0]}]
        )
    [message] = denials(docs, job)
    assert message.startswith("training pods read no job's SSH key"), message
    # In a TrainJob's runtime patch or its trainer's variables alike.
    patched = team_trainjob("kueue", runtimePatches=_patch({"volumes": [SECRET_VOLUME]}))
    assert [m for m in denials(docs, patched) if "SSH key" in m]
    env = [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "x-ssh", "key": "k"}}}]
    assert [m for m in denials(docs, team_trainjob("kueue", trainer={"env": env})) if "SSH" in m]


def test_team_pods_claim_devices_through_templates_only():
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    _pods(job)[1]["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "gpu"}]
    assert denials(docs, job) == []
    _pods(job)[1]["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimName": "theirs"}]
    [message] = denials(docs, job)
    assert message.startswith("training pods claim devices through a ResourceClaimTemplate")


@pytest.mark.parametrize("annotation", admission.GROUP_NAMES)
def test_on_volcano_team_pods_join_no_other_jobs_pod_group(annotation):
    """A pod naming another job's PodGroup joins that gang (round 8 of the attack: the
    victim's gang half-starts and hangs); in a template or a TrainJob's runtime patch."""
    docs = platform(cluster("volcano"))
    job = team_job("volcano")
    assert denials(docs, job) == []
    _pods(job)[1]["metadata"]["annotations"][annotation] = "llm-pretrain"
    [message] = denials(docs, job)
    assert message.startswith("training pods join their own job's PodGroup"), message
    queue = {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "vision"}}}
    patch = [{"trainingRuntimeSpec": {"template": {**queue, "spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {
            annotation: "llm-pretrain"}}}}}}
    ]}}}}]  # fmt: skip
    [message] = denials(docs, team_trainjob("volcano", runtimePatches=patch))
    assert message.startswith("training pods join their own job's PodGroup"), message
    # Kueue clusters leave the annotation alone: Volcano does not schedule there.
    kueue = team_job("kueue")
    _pods(kueue)[1]["metadata"]["annotations"][annotation] = "llm-pretrain"
    assert denials(platform(cluster("kueue")), kueue) == []


def team_jobset(name: str, **spec) -> dict:
    pod = {
        "metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "training-net"}},
        "spec": {"containers": [{"name": "c", "image": "ghcr.io/example-org/trainer:1.0.0"}]},
    }
    labels = {tenancy.TEAM_LABEL: "vision", tenancy.QUEUE_LABEL: "vision",
              tenancy.PRIORITY_LABEL: "standard"}  # fmt: skip
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "vision", "labels": labels},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}],
                 **spec},
    }  # fmt: skip


@pytest.mark.parametrize("name", ["vit-master-0", "vit-worker-12"])
def test_no_job_takes_the_name_of_a_pytorchjobs_services(name):
    """A job whose own Service is named after it (JobSet, a TrainJob's JobSet) named
    vit-master-0 would hold PyTorchJob vit's MASTER_ADDR (round 8 of the attack)."""
    docs = platform(cluster("kueue"))
    assert denials(docs, team_jobset("moe")) == []
    assert denials(docs, team_jobset("vit-master")) == []
    expected = "an MPIJob, JobSet, TrainJob (and a JobSet's subdomain) is not named"
    [message] = denials(docs, team_jobset(name))
    assert message.startswith(expected), message
    [message] = denials(docs, team_jobset("moe", network={"subdomain": name}))
    assert message.startswith(expected), message
    trainjob = team_trainjob("kueue")
    trainjob["metadata"]["name"] = name
    [message] = denials(docs, trainjob)
    assert message.startswith(expected), message
    # A PyTorchJob's Services carry a suffix of their own: its name is free.
    job = team_job("kueue")
    job["metadata"]["name"] = name
    assert denials(docs, job) == []


def test_a_port_named_metrics_is_the_metrics_port():
    """The namespace opens the port named metrics to every pod: under another number it
    opened a run's TCPStore to other jobs (round 8 of the attack)."""
    docs = platform(cluster("kueue"))
    job = team_job("kueue")
    ports = [{"name": "pytorchjob-port", "containerPort": 23456},
             {"name": "metrics", "containerPort": tenancy.METRICS_PORT_NUMBER}]  # fmt: skip
    _pods(job)[1]["spec"]["containers"][0]["ports"] = ports
    assert denials(docs, job) == []
    _pods(job)[1]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 23456}]
    [message] = denials(docs, job)
    assert message.startswith("a container port named metrics is 9400"), message
    patch = _patch({"containers": [{"name": "c", "ports": [
        {"name": "metrics", "containerPort": 29500}]}]})  # fmt: skip
    [message] = denials(docs, team_trainjob("kueue", runtimePatches=patch))
    assert message.startswith("a container port named metrics is 9400"), message


def test_the_training_templates_serve_metrics_on_the_metrics_port():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "base" / "training"
    found = []
    for path in root.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            text = yaml.safe_dump(doc)
            if "name: metrics" in text and "containerPort" in text:
                for line in text.splitlines():
                    if "TRAINER_METRICS_PORT" in line:
                        found.append(path)
    assert found
    for path in set(found):
        text = path.read_text()
        assert f"containerPort: {tenancy.METRICS_PORT_NUMBER}" in text, path
        assert f'value: "{tenancy.METRICS_PORT_NUMBER}"' in text, path


@pytest.mark.parametrize("initializer", admission.INITIALIZERS)
def test_a_trainjobs_initializers_read_no_jobs_ssh_key(initializer):
    docs = platform(cluster("kueue"))
    own = {initializer: {"storageUri": "hf://org/data", "secretRef": {"name": "hf-token"}}}
    assert denials(docs, team_trainjob("kueue", initializer=own)) == []
    theirs = {initializer: {"storageUri": "hf://org/data", "secretRef": {"name": "moe-ssh"}}}
    [message] = denials(docs, team_trainjob("kueue", initializer=theirs))
    assert message.startswith("training pods read no job's SSH key"), message


LOOK_ALIKES = {
    "ghcr.io/example-org/trainer:1.0.0": True,
    "registry.example.com/miner:1": True,
    "registry.example.com:5000/team/trainer:2": True,
    "ghcr.io/example-org-evil/miner:1.0": False,
    "registry.example.com.attacker.net/miner:1.0": False,
    "ghcr.io/example-organisation/trainer:1": False,
}


@pytest.mark.parametrize("image", sorted(LOOK_ALIKES))
def test_a_registries_entry_without_a_slash_ends_where_its_name_does(image):
    """Round 10: with registries written as registry.example.com,ghcr.io/example-org the
    admission policy's startsWith (and the rule) passed ghcr.io/example-org-evil/ and
    registry.example.com.attacker.net/."""
    profile = cluster("kueue", registries=["registry.example.com", "ghcr.io/example-org"])
    docs = platform(profile)
    assert PolicySet(docs).problems == {}
    job = team_job("kueue")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["image"] = image
    admitted = LOOK_ALIKES[image]
    assert (denials(docs, job) == []) is admitted, denials(docs, job)
    assert any(tenancy.from_registry(image, r) for r in profile.registries) is admitted


PINNED = {
    "ghcr.io/example-org/trainer:1.4": True,
    "ghcr.io/example-org/trainer:1.4@sha256:" + "a" * 64: False,
    "ghcr.io/example-org/trainer:1.5": False,
    "ghcr.io/example-org/trainer@sha256:" + "b" * 64: False,
    "registry.example.com/team/trainer@sha256:" + "c" * 64: True,
    "registry.example.com/team/trainer@sha256:" + "c" * 64 + "x": False,
    "registry.example.com/team/other:1": True,
}


@pytest.mark.parametrize("image", sorted(PINNED))
def test_a_registries_entry_with_a_tag_admits_that_image_alone(image):
    """Attack round 13: an entry pinning ghcr.io/example-org/trainer:1.4 admitted
    ghcr.io/example-org/trainer:1.4@sha256:<any>, which the runtime pulls by its digest
    alone (the tag is ignored), so any image pushed to the repository passed."""
    entries = [
        "ghcr.io/example-org/trainer:1.4",
        "registry.example.com/team/trainer@sha256:" + "c" * 64,
        "registry.example.com/team/other",
    ]
    profile = cluster("kueue", registries=entries)
    docs = platform(profile)
    assert PolicySet(docs).problems == {}
    job = team_job("kueue")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["image"] = image
    admitted = PINNED[image]
    assert (denials(docs, job) == []) is admitted, denials(docs, job)
    assert any(tenancy.from_registry(image, r) for r in profile.registries) is admitted


def test_rules_name_a_subresource_to_match_it():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}
    for resources, sub, matched in [
        (["pods"], "", True),
        (["pods"], "ephemeralcontainers", False),
        (["pods/ephemeralcontainers"], "ephemeralcontainers", True),
        (["pods/*"], "ephemeralcontainers", True),
        (["pods/*"], "", False),
        (["*"], "ephemeralcontainers", False),
        (["*/*"], "ephemeralcontainers", True),
        (["*/ephemeralcontainers"], "ephemeralcontainers", True),
    ]:
        rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": resources}  # fmt: skip
        docs = [policy([{"expression": "false"}], matchConstraints={"resourceRules": [rule]}),
                binding()]  # fmt: skip
        found = PolicySet(docs).denials(pod, operation="UPDATE", old=pod, subresource=sub)
        assert bool(found) is matched, (resources, sub)


def _running_pod() -> dict:
    """A pod a PyTorchJob's controller made in a team namespace, as the API server holds it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "vit-worker-0",
            "namespace": "vision",
            "labels": {"training.kubeflow.org/job-name": "vit", "app": "vit"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "vit",
                    "uid": "0c6b0a44-5a3f-4f53-9a3e-6b9d0f0c2a12",
                    "controller": True,
                }
            ],
        },
        "spec": {
            # The operator's own init container: its choice, not the registries'.
            "initContainers": [{"name": "init-pytorch", "image": "alpine:3.10"}],
            "containers": [{"name": "pytorch", "image": "ghcr.io/example-org/trainer:1.0.0"}],
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }


def _debugger(**fields) -> dict:
    return {"name": "debugger", "image": "ghcr.io/example-org/tools:1", **fields}


POD_UPDATES = {
    "finalizer-removed": (lambda p: p["metadata"].update(finalizers=[]), "", None),
    "own-label-added": (lambda p: p["metadata"]["labels"].update(note="slow"), "", None),
    "image-from-registries": (
        lambda p: p["spec"]["containers"][0].update(image="ghcr.io/example-org/trainer:1.0.1"),
        "",
        None,
    ),
    "image-from-elsewhere": (
        lambda p: p["spec"]["containers"][0].update(image="docker.io/someone/miner:1"),
        "",
        "an updated or ephemeral container image comes from",
    ),
    "debug-container": (
        lambda p: p["spec"].update(ephemeralContainers=[_debugger()]),
        "ephemeralcontainers",
        None,
    ),
    "debug-container-from-elsewhere": (
        lambda p: p["spec"].update(ephemeralContainers=[_debugger(image="busybox")]),
        "ephemeralcontainers",
        "an updated or ephemeral container image comes from",
    ),
    "debug-container-privileged": (
        lambda p: p["spec"].update(
            ephemeralContainers=[_debugger(securityContext={"privileged": True})]
        ),
        "ephemeralcontainers",
        "an ephemeral container takes no privilege",
    ),
    "debug-container-reading-every-checkpoint": (
        lambda p: p["spec"].update(
            ephemeralContainers=[_debugger(volumeMounts=[{"name": "ckpt", "mountPath": "/c"}])]
        ),
        "ephemeralcontainers",
        "an ephemeral container takes no privilege",
    ),
    "another-jobs-label": (
        lambda p: p["metadata"]["labels"].update({"training.kubeflow.org/job-name": "other"}),
        "",
        "a pod's update sets none of its controller's labels",
    ),
    "toleration-of-every-taint": (
        lambda p: p["spec"]["tolerations"].append({"operator": "Exists"}),
        "",
        "a pod's update adds no toleration of every taint",
    ),
}


@pytest.mark.parametrize("update", sorted(POD_UPDATES))
def test_what_an_update_changes_on_a_team_pod_is_checked(update):
    """Attack round 13: `trainops-runs` matched pods on CREATE only, so `kubectl set image`
    or `kubectl debug` on a job's running pod ran any image, privileged, with the whole
    checkpoint claim. Mocked API server request: the old object and the user cannot exist
    offline."""
    docs = platform(cluster("kueue"))
    assert PolicySet(docs).problems == {}
    old = _running_pod()
    new = copy.deepcopy(old)
    change, subresource, message = POD_UPDATES[update]
    change(new)
    found = [
        d.message
        for d in PolicySet(docs).denials(
            new, operation="UPDATE", old=old, user="alice@example.com", subresource=subresource
        )
    ]
    if message is None:
        assert found == [], found
    else:
        assert len(found) == 1 and found[0].startswith(message), found
    # The operator's own updates are its own.
    operator = overlay.job_controllers(cluster("kueue"))[0]
    assert (
        PolicySet(docs).denials(
            new, operation="UPDATE", old=old, user=operator, subresource=subresource
        )
        == []
    )
