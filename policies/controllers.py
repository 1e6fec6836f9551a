"""Operator semantics only their webhooks and controllers know: the Training Operator's
elastic env and HPA, its gang scheduler, Trainer v2's runtime patches and ancestor
labels, JobSet's and Volcano's failure handling, and Volcano's job plugins.

Facts: Training Operator v1.9.2 (`pkg/controller.v1/pytorch/elastic.go`, `hpa.go`,
`pkg/controller.v1/common/pod.go`); Trainer v2.3.0
(`pkg/runtime/framework/plugins/jobset/{jobset,builder}.go`,
`pkg/runtime/core/trainingruntime.go`); JobSet v0.12.0 `api/jobset/v1alpha2`
(failurePolicy); Volcano v1.15.1 (`webhooks/admission/jobs/validate/util.go`,
`webhooks/admission/jobs/mutate/mutate_job.go`, `controllers/job/plugins/{ssh,
distributed-framework/mpi}`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, is_int, mapping
from trainops.policy.trainjob import TRAINER_STEP_LABEL

from . import common, volcano

TRAINER_CONTAINERS = ("node", "dataset-initializer", "model-initializer")
GANG_SCHEDULERS = ("volcano", "scheduler-plugins-scheduler", "kube-batch")
# JobSet failure policy actions that restart without counting against maxRestarts.
UNCOUNTED_RESTARTS = ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts")
VOLCANO_EVENTS = (
    "*",
    "PodFailed",
    "PodEvicted",
    "PodPending",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
)
VOLCANO_ACTIONS = (
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
)
VOLCANO_MAX_RETRY = 3  # mutate_job.go DefaultMaxRetry
VOLCANO_SSH_PATH = "/root/.ssh"


def _volcano(doc: Document) -> bool:
    return doc.kind == "Job" and doc.api_version.startswith("batch.volcano.sh/")


@resource_rule(
    id="pytorchjob-rdzv-conf-empty",
    severity=ERROR,
    title="elasticPolicy.rdzvConf is left out rather than empty",
    why="The Training Operator joins rdzvConf into PET_RDZV_CONF and cuts the last comma with "
    "val[:len(val)-1] (v1.9.2 elastic.go); for an empty list that slice panics, every "
    "reconcile of the job fails and no pod is ever created.",
    fix="Remove rdzvConf, or give it at least one {key, value} entry.",
    kinds=("PyTorchJob",),
    source="https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/controller.v1/pytorch/elastic.go#L182",
)
def rdzv_conf_empty(doc: Document, ctx: Context) -> Iterator[Violation]:
    elastic = mapping(doc.obj.get("spec")).get("elasticPolicy")
    conf = mapping(elastic).get("rdzvConf")
    if isinstance(conf, list) and not conf:
        yield Violation(
            "rdzvConf: [] makes the operator's reconcile panic; no pod is created",
            ("spec", "elasticPolicy", "rdzvConf"),
        )


@resource_rule(
    id="elastic-metrics-under-gitops",
    severity=WARNING,
    title="Elastic jobs synced from Git are not resized by an autoscaler",
    why="elasticPolicy.metrics makes the Training Operator create an HPA that rescales "
    "Worker.replicas through the scale subresource (v1.9.2 hpa.go). Git holds the replica "
    "count too: each Argo CD sync or self-heal writes it back, and every flip restarts the "
    "rendezvous of the whole group.",
    fix="Drop elasticPolicy.metrics (size the job in Git), or ignore "
    "spec.pytorchReplicaSpecs.Worker.replicas in the Application's ignoreDifferences.",
    kinds=("PyTorchJob",),
)
def elastic_metrics(doc: Document, ctx: Context) -> Iterator[Violation]:
    elastic = mapping(mapping(doc.obj.get("spec")).get("elasticPolicy"))
    if elastic.get("metrics"):
        yield Violation(
            "elasticPolicy.metrics creates an HPA that fights the replica count in Git",
            ("spec", "elasticPolicy", "metrics"),
        )


@resource_rule(
    id="gang-scheduler-name",
    severity=WARNING,
    title="Gang-scheduled jobs leave the scheduler name to the operator",
    why="With gang scheduling on, the Training Operator sets the gang scheduler's name only in "
    "pod templates that name none; another schedulerName is kept (event "
    "SetPodTemplateSchedulerName, v1.9.2 common/pod.go) and the PodGroup built from "
    "runPolicy.schedulingPolicy is ignored: part of the job starts and holds its GPUs "
    "waiting for the rest.",
    fix="Remove schedulerName from the replica templates (or set it to the gang scheduler, "
    "e.g. volcano).",
    kinds=("PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"),
)
def gang_scheduler_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    policy = mapping(mapping(mapping(doc.obj.get("spec")).get("runPolicy")).get("schedulingPolicy"))
    if not policy:
        return
    for pod in ctx.pods(doc):
        name = pod.spec.get("schedulerName")
        if isinstance(name, str) and name and name not in GANG_SCHEDULERS:
            yield Violation(
                f"the {pod.role} pods name scheduler {name!r}: the gang from "
                "runPolicy.schedulingPolicy does not apply to them",
                (*pod.path, "schedulerName"),
            )


def _runtime_jobs(runtime: Document) -> dict[str, dict[str, Any]]:
    return {str(job.get("name")): job for job in common.replicated_jobs(runtime)}


def _containers(job: dict[str, Any]) -> set[str]:
    pod = mapping(
        mapping(mapping(mapping(job.get("template")).get("spec")).get("template")).get("spec")
    )
    return {
        str(c.get("name")) for key in ("containers", "initContainers") for c in dicts(pod.get(key))
    }


@resource_rule(
    id="trainjob-runtime-patch-targets",
    severity=ERROR,
    title="A TrainJob's runtime patches name what its runtime has",
    why="Trainer v2.3.0's JobSet plugin refuses runtimePatches that name a replicated job or a "
    "container its runtime does not have, and patches that give environment variables to the "
    "node, dataset-initializer or model-initializer containers (jobset.go Validate): the "
    "TrainJob is never created.",
    fix="Patch replicated jobs and containers by the names the runtime uses; give the training "
    "container's variables in spec.trainer.env.",
    kinds=("TrainJob",),
    source=(
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/jobset/jobset.go#L184",
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/jobset/jobset.go#L201",
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/jobset/jobset.go#L204",
    ),
)
def runtime_patch_targets(doc: Document, ctx: Context) -> Iterator[Violation]:
    runtime = ctx.runtime_for(doc)
    if runtime is None:
        return
    jobs = _runtime_jobs(runtime)
    patches = dicts(mapping(doc.obj.get("spec")).get("runtimePatches"))
    for index, patch in enumerate(patches):
        template = mapping(mapping(patch.get("trainingRuntimeSpec")).get("template"))
        at = ("spec", "runtimePatches", index, "trainingRuntimeSpec", "template", "spec")
        for position, job in enumerate(dicts(mapping(template.get("spec")).get("replicatedJobs"))):
            name = str(job.get("name"))
            where = (*at, "replicatedJobs", position)
            if name not in jobs:
                yield Violation(
                    f"runtime {runtime.name} has no replicated job {name!r} "
                    f"({', '.join(sorted(jobs))})",
                    (*where, "name"),
                )
                continue
            known = _containers(jobs[name])
            pod = mapping(
                mapping(mapping(mapping(job.get("template")).get("spec")).get("template")).get(
                    "spec"
                )
            )
            for key in ("containers", "initContainers"):
                for spot, container in enumerate(dicts(pod.get(key))):
                    cname = str(container.get("name"))
                    place = (*where, "template", "spec", "template", "spec", key, spot)
                    if cname not in known:
                        yield Violation(
                            f"replicated job {name} of runtime {runtime.name} has no {key[:-1]} "
                            f"{cname!r}",
                            (*place, "name"),
                        )
                    elif (
                        key == "containers" and cname in TRAINER_CONTAINERS and container.get("env")
                    ):
                        yield Violation(
                            f"env for container {cname} through runtimePatches is refused; use "
                            "spec.trainer.env",
                            (*place, "env"),
                        )


@resource_rule(
    id="runtime-ancestor-label",
    severity=ERROR,
    title="A training runtime marks its trainer step on the Job template",
    why="Trainer v2.3.0 finds the trainer step by the label "
    "trainer.kubeflow.org/trainjob-ancestor-step: trainer on a replicated job's Job template "
    "(replicatedJobs[].template.metadata.labels, builder.go and trainingruntime.go); on the "
    "pod template it is not read. A runtime without it has no trainer step: a TrainJob's "
    "image, command, args, env and numNodes are silently not applied.",
    fix="Put the label under replicatedJobs[].template.metadata.labels of the training job "
    "(as upstream's torch-distributed runtime does).",
    kinds=common.RUNTIME_KINDS,
    source=(
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/jobset/builder.go#L118",
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/core/trainingruntime.go#L192",
    ),
)
def runtime_ancestor_label(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    policy = mapping(spec.get("mlPolicy"))
    if not policy:
        return  # not a training runtime the plugins shape
    labelled = False
    for index, job in enumerate(common.replicated_jobs(doc)):
        template = mapping(job.get("template"))
        job_labels = mapping(mapping(template.get("metadata")).get("labels"))
        pod_labels = mapping(
            mapping(mapping(mapping(template.get("spec")).get("template")).get("metadata")).get(
                "labels"
            )
        )
        labelled = labelled or job_labels.get(TRAINER_STEP_LABEL) == "trainer"
        if TRAINER_STEP_LABEL in pod_labels and TRAINER_STEP_LABEL not in job_labels:
            yield Violation(
                f"{TRAINER_STEP_LABEL} is on the pod template of {job.get('name')!r}; the Trainer "
                "reads it from the Job template",
                (
                    "spec",
                    "template",
                    "spec",
                    "replicatedJobs",
                    index,
                    "template",
                    "spec",
                    "template",
                    "metadata",
                    "labels",
                    TRAINER_STEP_LABEL,
                ),
            )
            return
    if not labelled and common.replicated_jobs(doc):
        yield Violation(
            f"no replicated job is labelled {TRAINER_STEP_LABEL}: trainer; a TrainJob's "
            "trainer settings are not applied",
            ("spec", "template", "spec", "replicatedJobs"),
        )


def _gang_gpu_job(doc: Document, ctx: Context) -> bool:
    pods = ctx.pods(doc)
    total = sum(p.replicas or 1 for p in pods)
    return total > 1 and any(p.uses_gpus for p in pods)


@resource_rule(
    id="job-restart-budget",
    severity=WARNING,
    title="Multi-node GPU JobSets and Volcano Jobs can restart after a failure",
    why="A JobSet without failurePolicy (or with maxRestarts 0) is failed as soon as one child "
    "Job fails (JobSet v0.12.0 jobset_types.go), and so is every TrainJob of a runtime "
    "without one: a lost node or an Xid ends a run that could resume from its checkpoint. A "
    "Volcano Job that restarts on failures gets maxRetry 3 when it sets none "
    "(mutate_job.go), few for a run of weeks.",
    fix="Give the JobSet (or the runtime's template) failurePolicy.maxRestarts sized with "
    "`trainops plan`; give the Volcano Job an explicit maxRetry.",
    kinds=("JobSet", *common.RUNTIME_KINDS, "Job"),
)
def job_restart_budget(doc: Document, ctx: Context) -> Iterator[Violation]:
    if _volcano(doc):
        yield from _volcano_retries(doc, ctx)
        return
    if doc.kind == "Job":
        return
    runtime = doc.kind in common.RUNTIME_KINDS
    # A runtime's pods multiply with each TrainJob's numNodes: its GPUs are enough.
    if not (any(p.uses_gpus for p in ctx.pods(doc)) if runtime else _gang_gpu_job(doc, ctx)):
        return
    spec = mapping(doc.obj.get("spec"))
    at: tuple[Any, ...] = ("spec",)
    if runtime:
        spec = mapping(mapping(spec.get("template")).get("spec"))
        at = ("spec", "template", "spec")
    policy = spec.get("failurePolicy")
    if not isinstance(policy, dict):
        yield Violation(
            "no failurePolicy: the first failed Job fails the whole set", (*at, "replicatedJobs")
        )
        return
    actions = {str(rule.get("action")) for rule in dicts(policy.get("rules"))}
    restarts = policy.get("maxRestarts", 0)
    if is_int(restarts) and restarts == 0 and not actions & set(UNCOUNTED_RESTARTS):
        yield Violation(
            "failurePolicy.maxRestarts is 0: no restart after a failure", (*at, "failurePolicy")
        )


def _volcano_retries(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if "maxRetry" in spec or not _gang_gpu_job(doc, ctx):
        return
    policies = [*dicts(spec.get("policies"))]
    for task in dicts(spec.get("tasks")):
        policies += dicts(task.get("policies"))
    if any(str(p.get("action")) in ("RestartJob", "RestartTask", "RestartPod") for p in policies):
        yield Violation(
            f"the job restarts on failures but sets no maxRetry: it gives up after "
            f"{VOLCANO_MAX_RETRY} retries",
            ("spec", "policies"),
        )


def volcano_policy_problems(policies: list[dict[str, Any]]) -> Iterator[tuple[int, str]]:
    """(index, message) for each policy Volcano's job webhook refuses."""
    events: set[str] = set()
    codes: set[int] = set()
    for index, policy in enumerate(policies):
        listed = [str(e) for e in (policy.get("events") or []) if e] + (
            [str(policy["event"])] if policy.get("event") else []
        )
        code = policy.get("exitCode")
        if listed and code is not None:
            yield index, "must not specify event and exitCode simultaneously"
            return
        if not listed and code is None:
            yield index, "either event or exitCode should be specified"
            return
        if listed:
            for event in listed:
                if event not in VOLCANO_EVENTS:
                    yield index, f"invalid policy event {event!r}"
                    return
                if str(policy.get("action")) not in VOLCANO_ACTIONS:
                    yield index, f"invalid policy action {policy.get('action')!r}"
                    return
                if event in events:
                    yield index, f"duplicate event {event} across different policies"
                    return
                events.add(event)
        elif code == 0:
            yield index, "0 is not a valid error code"
            return
        elif code in codes:
            yield index, f"duplicate exitCode {code}"
            return
        else:
            codes.add(code)
    if "*" in events and len(events) > 1:
        yield len(policies) - 1, "with the event '*' no other event may have a policy"


@resource_rule(
    id="volcano-job-policies",
    severity=ERROR,
    title="Volcano Job lifecycle policies pass Volcano's webhook",
    why="Volcano's job admission webhook (v1.15.1 validate/util.go) refuses a policy with both "
    "an event and an exitCode (or neither), exitCode 0, an event or action it does not "
    "know, the same event or exit code in two policies, and '*' next to other events. The "
    "Job is never created and Argo CD's sync fails.",
    fix="Give each policy either events or an exitCode (not 0), each event and code once.",
    kinds=("Job",),
    source=(
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/jobs/validate/util.go#L69",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/jobs/validate/util.go#L106",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/jobs/validate/util.go#L118",
    ),
)
def volcano_job_policies(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not _volcano(doc):
        return
    spec = mapping(doc.obj.get("spec"))
    lists = [(("spec", "policies"), dicts(spec.get("policies")))]
    for index, task in enumerate(dicts(spec.get("tasks"))):
        lists.append((("spec", "tasks", index, "policies"), dicts(task.get("policies"))))
    for at, policies in lists:
        for index, message in volcano_policy_problems(policies):
            yield Violation(message, (*at, index))


def _plugin_args(plugins: dict[str, Any], name: str) -> dict[str, str]:
    """The flag values a job plugin parses from its arguments, `--k=v` and `--k v` alike, as
    Go's FlagSet does (up to the first argument it stops at)."""
    words = [str(arg) for arg in plugins.get(name) or []]
    return volcano.go_flags(words, volcano.PLUGIN_FLAGS.get(name, {}))[0]


@resource_rule(
    id="volcano-mpi-plugin",
    severity=ERROR,
    title="Volcano's mpi and ssh plugins match the Job's tasks and user",
    why="The mpi plugin sets MPI_HOST (the workers' host names) in the task named master and "
    "opens the ssh port, looking tasks up by name (master and worker unless --master and "
    "--worker say otherwise); with other task names MPI_HOST is never set and mpirun gets no "
    "hosts. The ssh plugin, which mpi brings along, mounts the job's keys at /root/.ssh "
    "unless --ssh-key-file-path says otherwise: a non-root user's ssh and sshd never read "
    "them ('Permission denied (publickey)').",
    fix="Name the tasks master and worker or pass --master=<task> --worker=<task> to the mpi "
    "plugin; for non-root containers pass --ssh-key-file-path=<home>/.ssh to the ssh plugin.",
    kinds=("Job",),
    source=(
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/distributed-framework/mpi/mpi.go#L84",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/ssh/const.go#L33",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/ssh/ssh.go#L151",
    ),
)
def volcano_mpi_plugin(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not _volcano(doc):
        return
    spec = mapping(doc.obj.get("spec"))
    plugins = mapping(spec.get("plugins"))
    tasks = {str(t.get("name")) for t in dicts(spec.get("tasks"))}
    if "mpi" in plugins:
        args = _plugin_args(plugins, "mpi")
        for role, default in (("master", "master"), ("worker", "worker")):
            name = args.get(role, default)
            if name not in tasks:
                yield Violation(
                    f"the mpi plugin's {role} task is {name!r}, which the job does not have "
                    f"({', '.join(sorted(tasks))})",
                    ("spec", "plugins", "mpi"),
                )
    if "mpi" in plugins or "ssh" in plugins:
        path = _plugin_args(plugins, "ssh").get("ssh-key-file-path", VOLCANO_SSH_PATH)
        users = {uid for pod in ctx.pods(doc) for uid in common.run_as_users(pod)}
        non_root = sorted(uid for uid in users if uid != 0)
        if path == VOLCANO_SSH_PATH and non_root:
            yield Violation(
                f"the ssh plugin mounts the keys at {path} while the containers run as uid "
                f"{non_root[0]}",
                ("spec", "plugins"),
            )
