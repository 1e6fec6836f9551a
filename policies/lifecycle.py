"""How jobs end and restart as their operators actually run them: idle MPI workers,
backoffLimit under ExitCode, torchrun's shutdown timeout and the grace period, and
ownership changes on shared checkpoint volumes."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import INFO, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, PodTemplate, argv, env_of, is_int, mapping

from . import common
from .commandline import TORCHRUN

# What an MPI worker runs when it only waits for mpirun (kubectl exec or SSH).
IDLE_COMMANDS = ("sleep infinity", "sleep inf", "sshd", "tail -f /dev/null")
TORCHRUN_SHUTDOWN_DEFAULT = 30  # torch.distributed.launcher.api: TORCH_ELASTIC_SHUTDOWN_TIMEOUT


@resource_rule(
    id="mpi-idle-workers-kept",
    severity=WARNING,
    title="MPIJobs delete their idle workers when the launcher is done",
    why="MPI workers only wait (sleep infinity, sshd) for mpirun; with cleanPodPolicy None "
    "(both MPI operators' default) they keep running, and keep their GPUs, after the "
    "launcher has finished, until the job is deleted. Deleting it is undone by a "
    "self-healing Argo CD Application. Upstream's MPI examples use Running.",
    fix="Set spec.runPolicy.cleanPodPolicy: Running (or All).",
    kinds=("MPIJob",),
)
def idle_workers(doc: Document, ctx: Context) -> Iterator[Violation]:
    run_policy = mapping(mapping(doc.obj.get("spec")).get("runPolicy"))
    policy = run_policy.get("cleanPodPolicy") or mapping(doc.obj.get("spec")).get("cleanPodPolicy")
    if policy not in (None, "None"):
        return
    for pod in ctx.pods(doc):
        if pod.role != "Worker" or not pod.containers:
            continue
        words = " ".join(argv(pod.containers[0]))
        if any(idle in words for idle in IDLE_COMMANDS):
            yield Violation(
                f"cleanPodPolicy is {policy or 'unset (None)'} and the Workers only wait "
                f"({words[:60]}): they keep running"
                + (", with their GPUs," if pod.uses_gpus else "")
                + " after the launcher finishes",
                ("spec", "runPolicy", "cleanPodPolicy"),
            )
            return


@resource_rule(
    id="backoff-limit-exitcode",
    severity=WARNING,
    title="backoffLimit is not relied on to bound ExitCode restarts",
    why="Under restartPolicy ExitCode the Training Operator deletes and recreates a pod that "
    "exits 128-255 and counts nothing: backoffLimit adds up container restarts of running "
    "pods (pkg/core/job.go PastBackoffLimit), which ExitCode pods never have "
    "(kubeflow/trainer#2045). An OOM kill (137) or a crash loop restarts forever.",
    fix="Drop backoffLimit from ExitCode jobs and bound retries where they are counted: "
    "torchrun's max restarts, the trainer's exit codes (1-127 end the job), "
    "activeDeadlineSeconds, or a Trainer v2 runtime (JobSet failurePolicy.maxRestarts).",
    kinds=tuple(REPLICA_FIELDS),
)
def backoff_limit_exitcode(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    run_policy = mapping(spec.get("runPolicy"))
    if "backoffLimit" not in run_policy:
        return
    replicas = mapping(spec.get(REPLICA_FIELDS[doc.kind]))
    exit_code = [r for r, s in replicas.items() if mapping(s).get("restartPolicy") == "ExitCode"]
    if exit_code:
        yield Violation(
            f"backoffLimit {run_policy['backoffLimit']} with restartPolicy ExitCode on "
            f"{', '.join(exit_code)}: pods that exit 128-255 are recreated without counting",
            ("spec", "runPolicy", "backoffLimit"),
        )


def _shutdown_timeout(container: dict) -> int | None:
    """torchrun's shutdown timeout for this container (None: not a number)."""
    words = argv(container)
    for index, word in enumerate(words):
        for flag in ("--shutdown-timeout", "--shutdown_timeout"):
            if word.startswith(flag + "="):
                value = word.split("=", 1)[1]
                return int(value) if value.isdigit() else None
            if word == flag and index + 1 < len(words):
                value = words[index + 1]
                return int(value) if value.isdigit() else None
    env = env_of(container)
    for name in ("PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"):
        value = env.get(name)
        if value is not None:
            return int(value) if str(value).isdigit() else None
    return TORCHRUN_SHUTDOWN_DEFAULT


@pod_rule(
    id="shutdown-timeout-grace",
    severity=WARNING,
    title="torchrun's shutdown timeout uses the pod's grace period",
    why="On SIGTERM torchrun gives its workers TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30 s unless set; "
    "--shutdown-timeout) and then SIGKILLs them, whatever terminationGracePeriodSeconds "
    "says: a 300 s grace period leaves an emergency checkpoint 30 s. A timeout above the "
    "grace period is cut short by the kubelet's SIGKILL at the grace period instead. The "
    "workers get the shorter of the two; with both equal (the defaults, 30 s) neither cuts "
    "the other short. Whether a save needs more depends on its size, so this is a risk, not "
    "a failure.",
    fix="Set TORCH_ELASTIC_SHUTDOWN_TIMEOUT (or --shutdown-timeout) to most of the grace "
    "period, leaving the launcher time to exit (trainops: 240 s of 300 s).",
    applies=common.gpu_pod,
    when={
        "warning": "the timeout is above the grace period (the kubelet cuts the save short), or "
        "far below it (torchrun does, with grace left)",
        "info": "the timeout equals the grace period (the defaults, 30 s each): the workers "
        "get that long either way",
    },
)
def shutdown_timeout(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    grace = pod.spec.get("terminationGracePeriodSeconds", 30)
    if pod.partial or not is_int(grace):
        return
    for index, container in enumerate(pod.containers):
        words = " ".join(argv(container))
        if not any(launcher in words for launcher in TORCHRUN):
            continue
        timeout = _shutdown_timeout(container)
        if timeout is None:
            continue
        if timeout > grace:
            yield Violation(
                f"torchrun's shutdown timeout ({timeout} s) is not below the grace period "
                f"({grace} s): the kubelet kills the workers first",
                pod.container_path(index),
            )
        elif timeout == grace:
            yield Violation(
                f"torchrun's shutdown timeout equals the grace period ({grace} s): the workers "
                f"get {grace} s to save on SIGTERM, whichever SIGKILL comes first",
                pod.container_path(index),
                severity=INFO,
            )
        elif grace - timeout > 60 and timeout * 2 <= grace:
            yield Violation(
                f"the grace period is {grace} s but torchrun kills its workers {timeout} s "
                "after SIGTERM",
                pod.container_path(index),
            )


@pod_rule(
    id="fsgroup-change-policy",
    severity=WARNING,
    title="fsGroup on a shared volume changes ownership only when needed",
    why="With fsGroup and the default fsGroupChangePolicy (Always), the kubelet walks and "
    "changes the group of every file on the volume at each pod start, for CSI drivers that "
    "support it: on a shared multi-TB checkpoint volume that is every job's checkpoints, "
    "again and again, delaying every start.",
    fix="Add fsGroupChangePolicy: OnRootMismatch to the pod's securityContext, and give the "
    "volume's root the group (setgid) once; drivers that ignore fsGroup need that anyway.",
    applies=common.mounts_claims,
)
def fsgroup_change_policy(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    security = mapping(pod.spec.get("securityContext"))
    if "fsGroup" not in security or security.get("fsGroupChangePolicy") == "OnRootMismatch":
        return
    namespace = common.pod_namespace(pod)
    for volume in pod.spec.get("volumes") or []:
        claim = mapping(mapping(volume).get("persistentVolumeClaim")).get("claimName")
        pvc = ctx.find("PersistentVolumeClaim", str(claim), namespace) if claim else None
        modes = mapping(pvc.obj.get("spec")).get("accessModes") if pvc is not None else None
        if isinstance(modes, list) and "ReadWriteMany" in modes:
            yield Violation(
                f"fsGroup {security['fsGroup']} on the shared claim {claim} without "
                "fsGroupChangePolicy: OnRootMismatch",
                (*pod.path, "securityContext"),
            )
            return
