"""`trainops doctor job` on recorded API responses (no API server exists in CI): the
recording holds the JSON bodies of the GET requests the command makes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.doctor.nccl_logs import job
from trainops.kube import RECORDING_KIND, request_key

NS = "training"
LABEL = "training.kubeflow.org/job-name=llama"


def pod(name: str, role: str, phase: str, restarts: int = 0, **status) -> dict:
    container = {"name": "pytorch", "restartCount": restarts, "state": {"running": {}}}
    container.update(status)
    return {
        "metadata": {"name": name, "labels": {"training.kubeflow.org/replica-type": role}},
        "spec": {
            "nodeName": f"gpu-{name[-1]}" if phase == "Running" else None,
            "containers": [{"name": "pytorch"}],
        },
        "status": {"phase": phase, "containerStatuses": [container] if phase == "Running" else []},
    }


def recording(tmp_path: Path) -> Path:
    ranks = job(nodes=3, gpus=2)
    ranks[3].transport = "Socket"
    logs = {
        host: "\n".join(line for r in ranks if r.host == host for line in r.lines())
        for host in ("llama-master-0", "llama-worker-0")
    }
    base = f"/api/v1/namespaces/{NS}"
    oom = {"lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
    responses = {
        request_key(f"{base}/pods", {"labelSelector": LABEL}): {
            "items": [
                pod("llama-master-0", "master", "Running", restarts=1, **oom),
                pod("llama-worker-0", "worker", "Running"),
                pod("llama-worker-1", "worker", "Pending"),
            ]
        },
        request_key(f"{base}/events", {}): {
            "items": [
                {
                    "reason": "FailedScheduling",
                    "involvedObject": {"name": "llama-worker-1"},
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/roce_vf.",
                },
                {
                    "reason": "FailedScheduling",
                    "involvedObject": {"name": "someone-else"},
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                },
            ]
        },
        request_key(f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/llama", {}): {
            "status": {
                "conditions": [
                    {"type": "Created"},
                    {"type": "Running", "message": "PyTorchJob training/llama is running."},
                ]
            }
        },
        request_key(
            f"{base}/pods/llama-master-0/log", {"container": "pytorch", "previous": "true"}
        ): logs["llama-master-0"],
        request_key(f"{base}/pods/llama-master-0/log", {"container": "pytorch"}): logs[
            "llama-master-0"
        ],
        request_key(f"{base}/pods/llama-worker-0/log", {"container": "pytorch"}): logs[
            "llama-worker-0"
        ],
    }
    path = tmp_path / "llama.json"
    path.write_text(json.dumps({"kind": RECORDING_KIND, "responses": responses}))
    return path


def test_doctor_job_on_recorded_api_responses(trainops, tmp_path):
    run = trainops(
        "doctor",
        "job",
        "llama",
        "-n",
        NS,
        "--recording",
        str(recording(tmp_path)),
        "--overlay",
        "overlays/prod-roce",
        "--format",
        "json",
    )
    assert run.code == 1, run.err
    report = json.loads(run.out)
    assert report["job"]["condition"] == "Running: PyTorchJob training/llama is running."
    assert [(p["name"], p["phase"], p["restarts"]) for p in report["pods"]] == [
        ("llama-master-0", "Running", 1),
        ("llama-worker-0", "Running", 0),
        ("llama-worker-1", "Pending", 0),
    ]
    found = {f["rule"]: f for f in report["findings"]}
    assert found["pod-oomkilled"]["message"] == "llama-master-0: container pytorch was OOMKilled"
    unschedulable = [f for f in report["findings"] if f["rule"] == "unschedulable"]
    assert len(unschedulable) == 1  # the other pod's event is not this job's
    assert "RDMA device plugin" in unschedulable[0]["fix"]
    assert found["socket-fallback"]["ranks"] == [3]
    assert found["missing-ranks"]["ranks"] == [4, 5]  # the pending pod's ranks


def test_doctor_job_text_report_on_recorded_api_responses(trainops, tmp_path):
    run = trainops("doctor", "job", "llama", "--recording", str(recording(tmp_path)))
    assert run.code == 1
    lines = run.out.splitlines()
    assert lines[0] == "job training/llama: Running: PyTorchJob training/llama is running."
    assert lines[1].split() == ["pod", "role", "phase", "node", "restarts", "state"]


def test_doctor_job_without_pods_is_a_one_line_error(trainops, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"kind": RECORDING_KIND, "responses": {}}))
    run = trainops("doctor", "job", "ghost", "--recording", str(empty))
    assert run.code == 2
    message = (
        "no pods labelled training.kubeflow.org/job-name=ghost or "
        "jobset.sigs.k8s.io/jobset-name=ghost in namespace training"
    )
    assert run.err.strip() == f"trainops: error: {message}"


def _ended(name: str, code: int) -> dict:
    terminated = {"reason": "Error" if code else "Completed", "exitCode": code}
    return {
        "metadata": {"name": name, "labels": {"training.kubeflow.org/replica-type": "worker"}},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "pytorch"}]},
        "status": {
            "phase": "Failed" if code else "Succeeded",
            "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": {"terminated": terminated}}
            ],
        },
    }


def test_a_failed_jobs_exit_codes_say_why_it_ended(trainops, tmp_path):
    """A Failed job whose pods ended with the launcher's codes: exit 6 (retry budget spent)
    is an error, a retried code (204) a warning, exit 0 nothing; never "no problems"."""
    base = f"/api/v1/namespaces/{NS}"
    responses = {
        request_key(f"{base}/pods", {"labelSelector": LABEL}): {
            "items": [
                _ended("llama-master-0", 6),
                _ended("llama-worker-0", 204),
                _ended("llama-worker-1", 0),
            ]
        },
        request_key(f"{base}/events", {}): {"items": []},
        request_key(f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/llama", {}): {
            "status": {"conditions": [{"type": "Failed", "message": "job failed"}]}
        },
    }
    for name in ("llama-master-0", "llama-worker-0", "llama-worker-1"):
        responses[request_key(f"{base}/pods/{name}/log", {"container": "pytorch"})] = ""
    path = tmp_path / "failed.json"
    path.write_text(json.dumps({"kind": RECORDING_KIND, "responses": responses}))
    run = trainops("doctor", "job", "llama", "--recording", str(path), "--format", "json")
    assert run.code == 1, run.err
    found = [f for f in json.loads(run.out)["findings"] if f["rule"] == "container-exit-code"]
    assert [(f["severity"], f["message"]) for f in found] == [
        (
            "error",
            "llama-master-0: container pytorch: last exit code 6: the retry budget is spent "
            "(retried failures kept coming without a new checkpoint): not retried",
        ),
        (
            "warning",
            "llama-worker-0: container pytorch: last exit code 204: rendezvous or the c10d "
            "store failed: retried",
        ),
    ]


def test_every_exit_code_of_the_trainer_has_a_meaning():
    """The doctor's table of the trainer's codes (the toolkit runs without the trainer
    installed, so it keeps its own) names every code trainer.errors.ExitCode has."""
    from trainer.errors import ExitCode
    from trainops.doctor.job import EXIT_MEANINGS

    assert {int(c) for c in ExitCode if c} <= set(EXIT_MEANINGS)


def test_a_trainjobs_pods_are_found_through_its_jobset(trainops, tmp_path):
    """A TrainJob's pods carry JobSet's label (its JobSet has the TrainJob's name), not the
    Training Operator's; the condition is the TrainJob's own."""
    base = f"/api/v1/namespaces/{NS}"
    worker = _ended("llama-node-0-0-abcde", 5)
    worker["metadata"]["labels"] = {
        "jobset.sigs.k8s.io/jobset-name": "llama",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
    }
    responses = {
        request_key(f"{base}/pods", {"labelSelector": "jobset.sigs.k8s.io/jobset-name=llama"}): {
            "items": [worker]
        },
        request_key(f"{base}/events", {}): {"items": []},
        request_key(f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/llama", {}): {
            "status": {"conditions": [{"type": "Failed", "message": "trainer node failed"}]}
        },
        request_key(f"{base}/pods/llama-node-0-0-abcde/log", {"container": "pytorch"}): "",
    }
    path = tmp_path / "trainjob.json"
    path.write_text(json.dumps({"kind": RECORDING_KIND, "responses": responses}))
    run = trainops("doctor", "job", "llama", "--recording", str(path), "--format", "json")
    assert run.code == 1, run.err
    report = json.loads(run.out)
    assert report["job"]["condition"] == "Failed: trainer node failed"
    assert [(p["name"], p["role"]) for p in report["pods"]] == [("llama-node-0-0-abcde", "node")]
    (found,) = [f for f in report["findings"] if f["rule"] == "container-exit-code"]
    assert "exit code 5: host or GPU memory ran out" in found["message"]


def test_a_jobsets_own_restarts_are_reported(trainops, tmp_path):
    """Issue 43 (new-user walkthrough): a JobSet's failure policy recreates every pod, so
    the pods' restart counts read 0 after 6 restarts; the JobSet's status.restarts says."""
    base = f"/api/v1/namespaces/{NS}"
    worker = pod("llama-node-0-0-abcde", "node", "Running")
    worker["metadata"]["labels"] = {
        "jobset.sigs.k8s.io/jobset-name": "llama",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
    }
    responses = {
        request_key(f"{base}/pods", {"labelSelector": "jobset.sigs.k8s.io/jobset-name=llama"}): {
            "items": [worker]
        },
        request_key(f"{base}/events", {}): {"items": []},
        request_key(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/llama", {}): {
            "status": {"restarts": 6, "conditions": []}
        },
        request_key(f"{base}/pods/llama-node-0-0-abcde/log", {"container": "pytorch"}): "",
    }
    path = tmp_path / "jobset.json"
    path.write_text(json.dumps({"kind": RECORDING_KIND, "responses": responses}))
    run = trainops("doctor", "job", "llama", "--recording", str(path), "--format", "json")
    report = json.loads(run.out)
    (found,) = [f for f in report["findings"] if f["rule"] == "pod-restarts"]
    assert found["message"].startswith("JobSet llama restarted 6 time(s)"), found
    assert report["pods"][0]["restarts"] == 0
    text = trainops("doctor", "job", "llama", "--recording", str(path))
    assert "JobSet llama restarted 6 time(s)" in text.out
