"""The Lua health checks of argocd/health/, run in a real Lua runtime (lupa) like Argo CD."""

from __future__ import annotations

import pytest
from lupa import LuaRuntime

from tests.support import REPO

HEALTH = REPO / "argocd" / "health"


def health(script: str, obj: dict) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute((HEALTH / script).read_text())
    return result["status"], result["message"]


def kubeflow_job(
    kind: str,
    *conditions: tuple[str, str, str],
    labels=None,
    suspend=False,
    api_version="kubeflow.org/v1",
) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "llama", "namespace": "training", "labels": labels or {}},
        "spec": {"runPolicy": {"suspend": suspend}},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": f"Job{t}", "message": m}
                for t, s, m in conditions
            ],
            "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 3}},
        },
    }


CREATED = ("Created", "True", "PyTorchJob llama is created.")
RUNNING = ("Running", "True", "PyTorchJob training/llama is running.")
RUNNING_DONE = ("Running", "False", "PyTorchJob training/llama is running.")
SUCCEEDED = ("Succeeded", "True", "PyTorchJob training/llama successfully completed.")
FAILED = (
    "Failed",
    "True",
    "PyTorchJob training/llama has failed because 1 Worker replica(s) failed.",
)
RESTARTING = (
    "Restarting",
    "True",
    "PyTorchJob llama is restarting because 1 Worker replica(s) failed.",
)
SUSPENDED = ("Suspended", "True", "PyTorchJob llama is suspended.")


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob", "TFJob"])
@pytest.mark.parametrize(
    ("conditions", "status", "words"),
    [
        ((), "Progressing", "Waiting for the training operator"),
        ((CREATED,), "Progressing", "waiting for pods"),
        ((CREATED, RUNNING), "Progressing", "is running"),
        ((CREATED, RUNNING, RESTARTING), "Progressing", "is restarting"),
        ((CREATED, RUNNING_DONE, SUCCEEDED), "Healthy", "successfully completed"),
        ((CREATED, RUNNING_DONE, FAILED), "Degraded", "has failed because 1 Worker"),
        ((CREATED, SUSPENDED), "Suspended", "suspended"),
    ],
)
def test_training_operator_job_health(kind, conditions, status, words):
    got_status, message = health("kubeflow-job.lua", kubeflow_job(kind, *conditions))
    assert got_status == status
    assert words in message


# What the MPI Operator v0.8.0 writes for an MPIJob v2beta1 (reasons MPIJob*, the
# launcher as a replica type of its own).
V2_CREATED = ("Created", "True", "MPIJob training/pi is created.")
V2_RUNNING = ("Running", "True", "MPIJob training/pi is running.")
V2_RUNNING_DONE = ("Running", "False", "MPIJob training/pi is running.")
V2_SUCCEEDED = ("Succeeded", "True", "MPIJob training/pi successfully completed.")
V2_FAILED = ("Failed", "True", "MPIJob training/pi has failed: launcher exited with code 1")
V2_RESTARTING = ("Restarting", "True", "MPIJob training/pi is restarting: worker pod deleted")
V2_SUSPENDED = ("Suspended", "True", "MPIJob suspended")


@pytest.mark.parametrize(
    ("conditions", "status", "words"),
    [
        ((), "Progressing", "Waiting for the training operator"),
        ((V2_CREATED,), "Progressing", "waiting for pods"),
        ((V2_CREATED, V2_RUNNING), "Progressing", "is running"),
        ((V2_CREATED, V2_RUNNING, V2_RESTARTING), "Progressing", "is restarting"),
        ((V2_CREATED, V2_RUNNING_DONE, V2_SUCCEEDED), "Healthy", "successfully completed"),
        ((V2_CREATED, V2_RUNNING_DONE, V2_FAILED), "Degraded", "launcher exited"),
        ((V2_CREATED, V2_SUSPENDED), "Suspended", "suspended"),
    ],
)
def test_mpi_operator_v2beta1_mpijob_health(conditions, status, words):
    job = kubeflow_job("MPIJob", *conditions, api_version="kubeflow.org/v2beta1")
    job["status"]["replicaStatuses"] = {"Launcher": {"active": 1}, "Worker": {"active": 2}}
    got_status, message = health("kubeflow-job.lua", job)
    assert (got_status, words in message) == (status, True), message


def test_a_v2beta1_mpijob_kueue_suspends_before_any_condition():
    job = kubeflow_job(
        "MPIJob",
        labels={"kueue.x-k8s.io/queue-name": "training"},
        suspend=True,
        api_version="kubeflow.org/v2beta1",
    )
    status, message = health("kubeflow-job.lua", job)
    assert (status, message) == ("Suspended", "Waiting for admission in Kueue queue training")


def test_a_job_kueue_holds_back_is_suspended_and_says_which_queue():
    job = kubeflow_job("PyTorchJob", labels={"kueue.x-k8s.io/queue-name": "training"}, suspend=True)
    status, message = health("kubeflow-job.lua", job)
    assert (status, message) == ("Suspended", "Waiting for admission in Kueue queue training")


def test_job_without_status_at_all():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"}}
    assert health("kubeflow-job.lua", job)[0] == "Progressing"


def trainjob(*conditions, suspend=False) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t"},
        "spec": {"suspend": suspend, "runtimeRef": {"name": "torch-distributed"}},
        "status": {
            "conditions": [{"type": t, "status": s, "message": m} for t, s, m in conditions]
        },
    }


# What Trainer v2.3.0 writes: Suspended (True, or False with reason Resumed),
# Complete, Failed; no Created condition.
RESUMED = ("Suspended", "False", "TrainJob is resumed")


@pytest.mark.parametrize(
    ("conditions", "suspend", "status"),
    [
        ((), False, "Progressing"),
        ((RESUMED,), False, "Progressing"),
        ((RESUMED, ("Complete", "True", "TrainJob completed")), False, "Healthy"),
        ((RESUMED, ("Failed", "True", "jobset failed: node-0 exit 1")), False, "Degraded"),
        ((("Suspended", "True", "TrainJob is suspended"),), True, "Suspended"),
        ((), True, "Suspended"),
    ],
)
def test_trainjob_health(conditions, suspend, status):
    assert health("trainjob.lua", trainjob(*conditions, suspend=suspend))[0] == status


def test_a_running_trainjob_says_which_jobs_are_ready():
    job = trainjob(RESUMED)
    job["status"]["jobsStatus"] = [
        {"name": "node", "active": 4, "ready": 3, "succeeded": 0, "failed": 0, "suspended": 0},
        {"name": "dataset-initializer", "active": 0, "succeeded": 1},
    ]
    assert health("trainjob.lua", job) == ("Progressing", "Training: node 3/4 ready")


def test_a_trainjob_kueue_holds_back_says_which_queue():
    job = trainjob(("Suspended", "True", "TrainJob is suspended"), suspend=True)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "training"}
    assert health("trainjob.lua", job) == (
        "Suspended",
        "Waiting for admission in Kueue queue training",
    )


def test_a_failed_trainjob_keeps_the_controllers_message():
    job = trainjob(RESUMED, ("Failed", "True", "jobset failed: node-0 exit 1"))
    assert health("trainjob.lua", job) == ("Degraded", "jobset failed: node-0 exit 1")


def jobset(*conditions, suspend=False, restarts=0, ready=None, terminal=None) -> dict:
    status = {
        "conditions": [
            {"type": t, "status": s, "reason": t, "message": m} for t, s, m in conditions
        ],
        "restarts": restarts,
    }
    if ready is not None:
        status["replicatedJobsStatus"] = [
            {"name": name, "ready": count, "active": count, "succeeded": 0, "failed": 0}
            for name, count in ready.items()
        ]
    if terminal:
        status["terminalState"] = terminal
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llama", "namespace": "training"},
        "spec": {"suspend": suspend, "replicatedJobs": []},
        "status": status,
    }


@pytest.mark.parametrize(
    ("obj", "status", "words"),
    [
        (jobset(), "Progressing", "Waiting for the JobSet controller"),
        (jobset(ready={"node": 1, "launcher": 0}), "Progressing", "1 job(s) ready in 2"),
        (jobset(ready={"node": 4}, restarts=2), "Progressing", "after 2 restart(s)"),
        (
            jobset(("StartupPolicyInProgress", "True", "in order startup policy in progress")),
            "Progressing",
            "in order",
        ),
        (jobset(("Completed", "True", "jobset completed successfully")), "Healthy", "completed"),
        (jobset(terminal="Completed"), "Healthy", "completed"),
        (
            jobset(("Failed", "True", "jobset failed due to reaching max number of restarts")),
            "Degraded",
            "max number of restarts",
        ),
        (jobset(terminal="Failed", restarts=6), "Degraded", "after 6 restart(s)"),
        (jobset(("Suspended", "True", "jobset is suspended")), "Suspended", "suspended"),
        (jobset(suspend=True), "Suspended", "suspended"),
    ],
)
def test_jobset_health(obj, status, words):
    got_status, message = health("jobset.lua", obj)
    assert (got_status, words in message) == (status, True), message


def test_jobset_without_status_at_all():
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"}}
    assert health("jobset.lua", obj) == ("Progressing", "Waiting for the JobSet controller")


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (None, "Progressing"),
        # Never Progressing once reconciled: a sync would wait on it without a limit.
        ("notReady", "Degraded"),
        ("ready", "Healthy"),
        ("disabled", "Degraded"),
        ("ignored", "Degraded"),
    ],
)
def test_clusterpolicy_health(state, status):
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}}
    if state is not None:
        policy["status"] = {"state": state}
    assert health("clusterpolicy.lua", policy)[0] == status


def test_every_script_is_wired_into_argocd_cm():
    kustomization = (REPO / "argocd" / "kustomization.yaml").read_text()
    for kind in (
        "kubeflow.org_PyTorchJob",
        "kubeflow.org_MPIJob",
        "trainer.kubeflow.org_TrainJob",
        "jobset.x-k8s.io_JobSet",
    ):
        assert f"resource.customizations.health.{kind}=health/" in kustomization
    for script in HEALTH.glob("*.lua"):
        assert f"=health/{script.name}" in kustomization
