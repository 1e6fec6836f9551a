"""A training job's pods, events and logs from the API server, and what they say.

Pods are found by the label their controller gives them (the Training and MPI
Operators' `training.kubeflow.org/job-name`, JobSet's `jobset.sigs.k8s.io/jobset-name`
for a TrainJob, whose JobSet has its name, or a JobSet).
Kubernetes-level trouble (OOM kills, evictions, unschedulable GPU or RDMA requests,
image pulls, crash loops) becomes findings here; the logs of every container, and of
the previous run of restarted ones, go on to the NCCL analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainops.doctor.findings import CATEGORY, DoctorFinding
from trainops.doctor.limits import Pattern
from trainops.errors import InputError
from trainops.kube import Cluster, NotFound, items
from trainops.model import ERROR, INFO, WARNING
from trainops.profile.tenancy import JOB_LABELS
from trainops.rules import RuleInfo, register

POD_LABELS = tuple(dict.fromkeys(JOB_LABELS.values()))
ROLE_LABELS = ("training.kubeflow.org/replica-type", "jobset.sigs.k8s.io/replicatedjob-name")
# Where each job kind that names its pods so is read, for its conditions.
JOB_PATHS = (
    "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{name}",
    "/apis/kubeflow.org/v1/namespaces/{ns}/mpijobs/{name}",
    "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs/{name}",
    "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs/{name}",
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}",
    "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}",
)

# Exit codes of the trainer image and its launcher (trainer.errors.ExitCode, kept equal
# by tests/doctor/test_doctor_job.py) and SIGKILL's. 1-127 fail the job under the
# operator's ExitCode restart policy, 128-255 restart it.
EXIT_MEANINGS = {
    1: "unexpected error in the program (a bug): not retried",
    2: "bad arguments, data or environment: not retried",
    3: "the loss diverged (NaN/Inf after every rollback): not retried",
    4: "NCCL used another transport than the cluster promises: not retried",
    5: "host or GPU memory ran out: not retried",
    6: "the retry budget is spent (retried failures kept coming without a new checkpoint): "
    "not retried",
    137: "killed by SIGKILL: out of memory, or the grace period ran out",
    143: "stopped by SIGTERM (preemption or restart); the trainer saved a checkpoint",
    200: "the trainer's watchdog ended a hung step: retried",
    201: "a peer rank disappeared during a collective: retried",
    202: "an earlier launch of the job still held its checkpoint directory: retried",
    203: "GPU, driver or NCCL fault: retried",
    204: "rendezvous or the c10d store failed: retried",
    205: "a failure the run's own patterns call transient: retried",
    206: "training ended but its last step could not be saved: retried from the newest checkpoint",
}
PERMANENT_EXIT = range(1, 128)


@dataclass
class PodState:
    name: str
    role: str
    phase: str
    node: str
    restarts: int
    state: str  # running, waiting: <reason>, terminated: <reason> (exit N)
    containers: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)


@dataclass
class JobEvidence:
    name: str
    namespace: str
    condition: str | None
    pods: list[PodState]
    events: list[dict[str, Any]]
    logs: list[tuple[str, list[str]]]
    jobset_restarts: int = 0  # whole-job restarts of the JobSet (a TrainJob's has its name)


def _jobset_restarts(cluster: Cluster, name: str, namespace: str) -> int:
    """How often the JobSet recreated all its jobs (status.restarts): its pods are new each
    time, so their own restart counts say nothing of it."""
    try:
        jobset = cluster.get(JOB_PATHS[-1].format(ns=namespace, name=name))
    except NotFound:
        return 0
    restarts = (jobset.get("status") or {}).get("restarts")
    return restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0


def _condition(cluster: Cluster, name: str, namespace: str) -> str | None:
    for path in JOB_PATHS:
        try:
            job = cluster.get(path.format(ns=namespace, name=name))
        except NotFound:
            continue
        conditions = (job.get("status") or {}).get("conditions") or []
        if conditions:
            last = conditions[-1]
            return f"{last.get('type')}: {last.get('message') or last.get('reason') or ''}".strip()
        return "no conditions yet"
    return None


def _pod_state(pod: dict[str, Any]) -> PodState:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    statuses = status.get("containerStatuses") or []
    state, problems = status.get("phase", "Unknown").lower(), []
    if status.get("reason") == "Evicted":
        problems.append(("evicted", status.get("message") or "evicted"))
    for container in statuses:
        current = container.get("state") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        if "waiting" in current:
            reason = current["waiting"].get("reason") or "waiting"
            state = f"waiting: {reason}"
            if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
                problems.append(("image", current["waiting"].get("message") or reason))
            if reason == "CrashLoopBackOff":
                problems.append(("crashloop", _exit_text(last)))
        elif "terminated" in current:
            ended = current["terminated"]
            state = f"terminated: {ended.get('reason')} (exit {ended.get('exitCode')})"
            last = last or ended
        for ended in (last, current.get("terminated") or {}):
            if ended.get("reason") == "OOMKilled":
                problems.append(("oom", container.get("name", "?")))
                break
        else:
            ended = current.get("terminated") or {}
            code = ended.get("exitCode")
            if isinstance(code, int) and code != 0 and "waiting" not in current:
                kind = "exit" if code in PERMANENT_EXIT else "exit-retried"
                problems.append((kind, f"{container.get('name', '?')}: {_exit_text(ended)}"))
    return PodState(
        name=meta.get("name", "?"),
        role=next((labels[k] for k in ROLE_LABELS if k in labels), "?"),
        phase=status.get("phase", "Unknown"),
        node=spec.get("nodeName") or "-",
        restarts=sum(int(c.get("restartCount") or 0) for c in statuses),
        state=state,
        containers=[c.get("name") for c in spec.get("containers") or [] if c.get("name")],
        problems=problems,
    )


def _exit_text(terminated: dict[str, Any]) -> str:
    code = terminated.get("exitCode")
    if code is None:
        return "no exit code recorded"
    meaning = EXIT_MEANINGS.get(int(code), "")
    return f"last exit code {code}" + (f": {meaning}" if meaning else "")


def gather(cluster: Cluster, name: str, namespace: str) -> JobEvidence:
    base = f"/api/v1/namespaces/{namespace}"
    raw: list[dict[str, Any]] = []
    for label in POD_LABELS:
        raw = raw or items(cluster, f"{base}/pods", labelSelector=f"{label}={name}")
    if not raw:
        tried = " or ".join(f"{label}={name}" for label in POD_LABELS)
        raise InputError(f"no pods labelled {tried} in namespace {namespace}")
    pods = sorted((_pod_state(p) for p in raw), key=lambda p: p.name)
    names = {p.name for p in pods} | {name}
    events = [
        e
        for e in items(cluster, f"{base}/events")
        if (e.get("involvedObject") or {}).get("name") in names
    ]
    logs = []
    for pod in pods:
        for container in pod.containers:
            path = f"{base}/pods/{pod.name}/log"
            runs = [("", {"container": container})]
            if pod.restarts:
                runs.insert(0, (" (previous)", {"container": container, "previous": "true"}))
            for suffix, query in runs:
                try:
                    text = cluster.text(path, **query)
                except NotFound:
                    continue
                logs.append((f"{pod.name}/{container}{suffix}", text.splitlines()))
    condition = _condition(cluster, name, namespace)
    restarts = _jobset_restarts(cluster, name, namespace)
    return JobEvidence(name, namespace, condition, pods, events, logs, restarts)


_INSUFFICIENT = Pattern(r"Insufficient ([\w./-]+)")


POD_WHY = (
    "Kubernetes-level trouble (from the pods' states and events) stops or restarts ranks "
    "before NCCL has anything to say."
)


def _pod_rule(rule: str, severity: str, title: str, fix: str) -> RuleInfo:
    return register(RuleInfo(rule, severity, title, POD_WHY, fix, category=CATEGORY))


# kind -> (rule, message template)
POD_PROBLEMS = {
    "oom": (
        _pod_rule(
            "pod-oomkilled",
            ERROR,
            "No container of the job is OOMKilled",
            "Raise the memory limit (memoryPerPod in cluster.yaml), remember that /dev/shm "
            "(shmSize) counts against it, and lower DataLoader workers.",
        ),
        "{pod}: container {detail} was OOMKilled",
    ),
    "evicted": (
        _pod_rule(
            "pod-evicted",
            WARNING,
            "No pod of the job is evicted",
            "Node pressure or preemption: the trainer checkpoints on SIGTERM; check the "
            "node's conditions and the job's priority class.",
        ),
        "{pod} was evicted: {detail}",
    ),
    "image": (
        _pod_rule(
            "image-pull",
            ERROR,
            "Every pod can pull its image",
            "Check the image reference (image in cluster.yaml or the run) and the registry "
            "credentials (imagePullSecrets).",
        ),
        "{pod} cannot pull its image: {detail}",
    ),
    "exit": (
        _pod_rule(
            "container-exit-code",
            ERROR,
            "No container of the job ended with a failing exit code",
            "Read the container's log for the cause its exit code stands for "
            "(docs/runbook.md, 'What is retried'); 1-127 end the job under the ExitCode "
            "restart policy, 128-255 restart it.",
        ),
        "{pod}: container {detail}",
    ),
    "crashloop": (
        _pod_rule(
            "crash-loop",
            ERROR,
            "No pod is crash-looping",
            "Read the previous run's log (doctor shows it as '(previous)').",
        ),
        "{pod} is crash-looping, {detail}",
    ),
}
# A code the operator restarts the pod for: the same rule, a warning.
POD_PROBLEMS["exit-retried"] = POD_PROBLEMS["exit"]
RESTARTS = _pod_rule(
    "pod-restarts",
    INFO,
    "Pods that restarted",
    "Compare the '(previous)' log with the current one.",
)
UNSCHEDULABLE = _pod_rule(
    "unschedulable",
    ERROR,
    "Every pod of the job can be scheduled",
    "Read the scheduler's message; `trainops preflight OVERLAY` checks the nodes.",
)
NO_NCCL_EVIDENCE = _pod_rule(
    "no-nccl-evidence",
    INFO,
    "The job's logs carry NCCL output",
    "Set NCCL_DEBUG=INFO in the job template (it is by default).",
)


def pod_findings(evidence: JobEvidence, rdma_resource: str | None = None) -> list[DoctorFinding]:
    found = []
    if evidence.jobset_restarts:
        found.append(
            DoctorFinding(
                RESTARTS.id,
                RESTARTS.severity,
                f"JobSet {evidence.name} restarted {evidence.jobset_restarts} time(s): its "
                "failure policy recreates every pod, so the pods' own restart counts start at "
                "0 and the logs of earlier attempts went with their pods",
                "Read the JobSet's status and events (kubectl describe jobset) for why each "
                "attempt failed; the pods' logs show only the current one.",
            )
        )
    for pod in evidence.pods:
        for kind, detail in pod.problems:
            rule, template = POD_PROBLEMS[kind]
            message = template.format(pod=pod.name, detail=detail)
            severity = WARNING if kind == "exit-retried" else rule.severity
            found.append(DoctorFinding(rule.id, severity, message, rule.fix))
        if pod.restarts and not pod.problems:
            found.append(
                DoctorFinding(
                    RESTARTS.id,
                    RESTARTS.severity,
                    f"{pod.name} restarted {pod.restarts} time(s)",
                    RESTARTS.fix,
                )
            )
    seen = set()
    for event in evidence.events:
        pod = (event.get("involvedObject") or {}).get("name")
        message = (event.get("message") or "").strip()
        if event.get("reason") != "FailedScheduling" or (pod, message) in seen:
            continue
        seen.add((pod, message))
        missing = _INSUFFICIENT.findall(message)
        if "nvidia.com/gpu" in missing:
            fix = (
                "Not enough free GPUs on matching nodes: wait for quota (Kueue) or reduce "
                "nodes; check gpusPerNode and gpuProduct in cluster.yaml."
            )
        elif (rdma_resource in missing) or any(
            marker in m for m in missing for marker in ("rdma", "roce", "sriov")
        ):
            fix = (
                "The RDMA device plugin offers too few devices: check rdmaResource and "
                "rdmaPerPod in cluster.yaml and the device plugin on the nodes."
            )
        elif "node affinity" in message or "node selector" in message:
            fix = (
                "No node carries the labels the pod requires: check gpuProduct and "
                "topologyKey in cluster.yaml against the nodes' labels."
            )
        else:
            fix = UNSCHEDULABLE.fix
        found.append(
            DoctorFinding(UNSCHEDULABLE.id, ERROR, f"{pod} cannot be scheduled: {message}", fix)
        )
    return found
