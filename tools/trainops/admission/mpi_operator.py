"""MPIJob kubeflow.org/v2beta1: the MPI Operator v0.8.0's own validation.

Facts from kubeflow/mpi-operator v0.8.0 `pkg/apis/kubeflow/validation/validation.go`
(ValidateMPIJob) and `pkg/apis/kubeflow/v2beta1/default.go` (SetDefaults_MPIJob).
The MPI Operator has no admission webhook: its controller defaults the job,
validates it, and on failure records a ValidationError event and creates
nothing. So these errors are accepted at apply and seen only as that event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.admission import names
from trainops.admission.embedded import later
from trainops.admission.field import WEBHOOK, Problem, invalid, not_supported, required
from trainops.admission.workloads import pod_template

RESTART_POLICIES = ("Never", "OnFailure")
IMPLEMENTATIONS = ("Intel", "MPICH", "OpenMPI")
CLEAN_POLICIES = ("All", "None", "Running")
MANAGERS = ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue")
NOTE = (
    " (accepted at apply: the MPI Operator validates the job when it reconciles it, records "
    "a ValidationError event and creates no pods)"
)
FIX = "Fix the MPIJob as the MPI Operator's validation asks; until then it runs nothing."
# Volumes the controller adds to the pods it creates, so a mount of one is no missing volume
# (v0.8.0 pkg/controller/mpi_job_controller.go: setupSSHOnPod adds ssh-auth to the launcher
# and the workers, newLauncherPodTemplate adds mpi-job-config to the launcher).
SSH_AUTH_VOLUME = "ssh-auth"
CONFIG_VOLUME = "mpi-job-config"
OPERATOR_VOLUMES = {
    "Launcher": frozenset({SSH_AUTH_VOLUME, CONFIG_VOLUME}),
    "Worker": frozenset({SSH_AUTH_VOLUME}),
}


def _problem(path: tuple, message: str) -> Problem:
    return Problem(WEBHOOK, path, message + NOTE, FIX)


def check(obj: dict[str, Any]) -> Iterator[Problem]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    specs = spec.get("mpiReplicaSpecs")
    specs = specs if isinstance(specs, dict) else None
    worker = specs.get("Worker") if specs else None
    count = worker.get("replicas") if isinstance(worker, dict) else None
    highest = count - 1 if isinstance(count, int) and count > 0 else 0
    # The controller validates the stored object: a generateName has become a name by then.
    meta = obj.get("metadata")
    name = names.object_name(meta) if isinstance(meta, dict) else None
    if isinstance(name, str) and name:
        hostname = f"{name}-worker-{highest}"
        errors = names.dns1035_label(hostname)
        if errors:
            yield _problem(
                ("metadata", "name" if meta.get("name") else "generateName"),
                invalid(
                    name,
                    f'will not able to create pod and service with invalid DNS label "{hostname}": '
                    + ", ".join(errors),
                ),
            )
    slots = spec.get("slotsPerWorker")
    if isinstance(slots, int) and slots < 0:
        yield _problem(
            ("spec", "slotsPerWorker"), invalid(slots, "must be greater than or equal to 0")
        )
    implementation = spec.get("mpiImplementation") or "OpenMPI"
    if implementation not in IMPLEMENTATIONS:
        yield _problem(
            ("spec", "mpiImplementation"), not_supported(implementation, IMPLEMENTATIONS)
        )
    yield from _run_policy(spec.get("runPolicy"))
    if specs is None:
        yield _problem(("spec", "mpiReplicaSpecs"), required("must have replica specs"))
        return
    at = ("spec", "mpiReplicaSpecs")
    launcher = specs.get("Launcher")
    if not isinstance(launcher, dict):
        yield _problem((*at, "Launcher"), required("must have Launcher replica spec"))
    else:
        yield from _replica(launcher, (*at, "Launcher"), "OnFailure", OPERATOR_VOLUMES["Launcher"])
        if launcher.get("replicas", 1) != 1:
            yield _problem(
                (*at, "Launcher", "replicas"), invalid(launcher["replicas"], "must be 1")
            )
    if isinstance(worker, dict):
        yield from _replica(worker, (*at, "Worker"), "Never", OPERATOR_VOLUMES["Worker"])
        workers = worker.get("replicas", 0)  # the operator's default
        if isinstance(workers, int) and workers <= 0:
            yield _problem(
                (*at, "Worker", "replicas"), invalid(workers, "must be greater than or equal to 1")
            )


def _replica(
    replica: dict[str, Any], at: tuple, restart_default: str, added: frozenset[str]
) -> Iterator[Problem]:
    policy = replica.get("restartPolicy") or restart_default
    if policy not in RESTART_POLICIES:
        yield _problem((*at, "restartPolicy"), not_supported(policy, RESTART_POLICIES))
    template = replica.get("template") if isinstance(replica.get("template"), dict) else {}
    pod = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    if not [c for c in pod.get("containers") or [] if isinstance(c, dict)]:
        yield _problem(
            (*at, "template", "spec", "containers"), required("must define at least one container")
        )
    yield from later(pod_template(template, (*at, "template"), added), "MPIJob", "the MPI Operator")


def _run_policy(policy: Any) -> Iterator[Problem]:
    policy = policy if isinstance(policy, dict) else {}
    at = ("spec", "runPolicy")
    clean = policy.get("cleanPodPolicy") or "None"
    if clean not in CLEAN_POLICIES:
        yield _problem((*at, "cleanPodPolicy"), not_supported(clean, CLEAN_POLICIES))
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        value = policy.get(key)
        if isinstance(value, int) and value < 0:
            yield _problem((*at, key), invalid(value, "must be greater than or equal to 0"))
    manager = policy.get("managedBy")
    if isinstance(manager, str) and manager not in MANAGERS:
        yield _problem((*at, "managedBy"), not_supported(manager, MANAGERS))
