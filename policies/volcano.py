"""Volcano Jobs: what the job plugins provide and the pods expect from them.

Facts from volcano v1.15.1: the svc plugin writes /etc/volcano/<task>.host and sets
VC_<TASK>_HOSTS / VC_<TASK>_NUM (pkg/controllers/job/plugins/svc/const.go); the env
plugin sets VK_TASK_INDEX and VC_TASK_INDEX (plugins/env/const.go); the admission
webhook adds svc when the tensorflow, mpi, pytorch or ray plugin is on
(pkg/webhooks/admission/jobs/mutate/mutate_job.go).

The job webhook (pkg/webhooks/admission/jobs/validate/admit_job.go validateJobCreate)
refuses duplicate task names, a task minAvailable above its replicas, job and pod names
that are not qualified names, unknown plugins, a networkTopology with both
highestTierAllowed and highestTierName, partition policies whose arithmetic does not add
up, dependsOn that is not a DAG, and jobs sent to the root queue or to a queue with child
queues; the queue webhook (queues/validate/validate_queue.go) refuses a guarantee above
deserved, deserved above capability, bad hierarchy annotations and a parent that is the
queue itself or does not exist; the pod webhook (pods/validate/admit_pod.go) refuses a
pod that is not a Volcano Job's with both disruption-budget annotations, or either one not a
positive integer or a percentage of 1-99. The ray plugin
(plugins/distributed-framework/ray/ray.go) needs a task named head (--head) or no pod is
created, and starts Ray only in the containers named head and worker, replacing their
command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops import quantity
from trainops.admission import names
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, PodTemplate, Violation, pod_rule, resource_rule, sets_any
from trainops.policy.pods import dicts, is_int, mapping

NEEDS_SVC = ("tensorflow", "mpi", "pytorch", "ray")
_HOST_FILE = re.compile(r"/etc/volcano/([A-Za-z0-9][\w.-]*?)\.host")
_HOST_VARIABLE = re.compile(r"\bVC_([A-Z0-9_]+)_(HOSTS|NUM)\b")
_INDEX_VARIABLE = re.compile(r"\b(VK_TASK_INDEX|VC_TASK_INDEX)\b")


def _texts(container: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    for key in ("command", "args"):
        for position, word in enumerate(container.get(key) or []):
            if isinstance(word, str):
                yield (key, position), word
    for position, entry in enumerate(dicts(container.get("env"))):
        if isinstance(entry.get("value"), str):
            yield ("env", position, "value"), entry["value"]


@resource_rule(
    id="volcano-plugin-files",
    severity=ERROR,
    source=(
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/svc/svc.go#L200",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/env/const.go#L27",
    ),
    title="A Volcano Job's pods use only the hosts files and variables its plugins provide",
    why="/etc/volcano/<task>.host and VC_<TASK>_HOSTS exist only with the svc plugin (which "
    "the tensorflow, mpi, pytorch and ray plugins bring along), VC_TASK_INDEX only with the "
    "env plugin, and each only for tasks the job has. Without them mpirun or the launcher "
    "gets no host list and the job fails at start or waits forever.",
    fix="Enable the plugin (spec.plugins: {svc: [], env: []}) and name tasks the job has.",
    kinds=("Job",),
)
def plugin_files(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not doc.api_version.startswith("batch.volcano.sh/"):
        return
    spec = mapping(doc.obj.get("spec"))
    plugins = mapping(spec.get("plugins"))
    svc = "svc" in plugins or any(p in plugins for p in NEEDS_SVC)
    tasks = {str(t.get("name")) for t in dicts(spec.get("tasks"))}
    variables = {t.upper().replace("-", "_") for t in tasks}
    for index, task in enumerate(dicts(spec.get("tasks"))):
        template = mapping(mapping(task.get("template")).get("spec"))
        for position, container in enumerate(dicts(template.get("containers"))):
            base = ("spec", "tasks", index, "template", "spec", "containers", position)
            for where, text in _texts(container):
                at = (*base, *where)
                for name in _HOST_FILE.findall(text):
                    if not svc:
                        yield Violation(f"{text!r} reads /etc/volcano, but no svc plugin", at)
                    elif name not in tasks:
                        yield Violation(f"/etc/volcano/{name}.host: no task {name!r}", at)
                for name, _ in _HOST_VARIABLE.findall(text):
                    if not svc:
                        yield Violation(f"VC_{name}_* needs the svc plugin", at)
                    elif name not in variables:
                        yield Violation(f"VC_{name}_*: no task {name.lower()!r}", at)
                if _INDEX_VARIABLE.search(text) and "env" not in plugins:
                    yield Violation(f"{text!r}: the task index needs the env plugin", at)


VOLCANO = "https://github.com/volcano-sh/volcano/blob/v1.15.1/"
ADMIT_JOB = VOLCANO + "pkg/webhooks/admission/jobs/validate/admit_job.go"
VALIDATE_QUEUE = VOLCANO + "pkg/webhooks/admission/queues/validate/validate_queue.go"
ADMIT_POD = VOLCANO + "pkg/webhooks/admission/pods/validate/admit_pod.go#L114-L134"
# The disruption-budget annotations the pod webhook validates (volcano.sh/apis
# scheduling/v1 labels.go), on pods that belong to no PodGroup by annotation.
POD_BUDGETS = ("volcano.sh/jdb-min-available", "volcano.sh/jdb-max-unavailable")
POD_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
# Controllers that put their pods in a PodGroup by that annotation when Volcano gangs
# them (training-operator v1.9.0 and mpi-operator v0.8.0 volcano schedulers), so the
# webhook never reads the budgets of their pods.
GROUPING_KINDS = frozenset({"PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"})
# The job plugins volcano v1.15.1 registers (pkg/controllers/job/plugins/factory.go).
JOB_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")
HIERARCHY = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS = "volcano.sh/hierarchy-weights"


def _volcano_job(doc: Document) -> bool:
    return doc.api_version.startswith("batch.volcano.sh/")


def _volcano_job_or_group(doc: Document) -> bool:
    return doc.api_version.startswith(("batch.volcano.sh/", "scheduling.volcano.sh/"))


def _volcano_queue(doc: Document) -> bool:
    return doc.api_version.startswith("scheduling.volcano.sh/")


def _topology_policy_cpus(task: dict[str, Any], at: tuple[Any, ...]) -> Iterator[Violation]:
    """With a NUMA topologyPolicy every container must ask for whole CPUs."""
    if task.get("topologyPolicy") in (None, "", "none"):
        return
    spec = mapping(mapping(task.get("template")).get("spec"))
    for key in ("containers", "initContainers"):
        for position, container in enumerate(dicts(spec.get(key))):
            wanted = mapping(container.get("resources"))
            amounts = mapping(wanted.get("requests")) or mapping(wanted.get("limits"))
            cpus = quantity.parse(amounts.get("cpu")) if "cpu" in amounts else None
            if cpus is None or cpus == 0 or cpus.denominator != 1:
                yield Violation(
                    f"task {task.get('name')}: topologyPolicy {task['topologyPolicy']} needs a "
                    f"whole number of CPUs in every container; {container.get('name')} asks for "
                    f"{amounts.get('cpu', 'none')}",
                    (*at, "template", "spec", key, position, "resources"),
                )


def _not_dag(tasks: list[dict[str, Any]]) -> bool:
    """dependsOn edges do not order every task (a cycle, or a task named that is not one)."""
    indegree = {str(t.get("name")): 0 for t in tasks}
    edges: dict[str, list[str]] = {}
    for task in tasks:
        for before in mapping(task.get("dependsOn")).get("name") or []:
            edges.setdefault(str(before), []).append(str(task.get("name")))
            indegree[str(task.get("name"))] += 1
    ready = [name for name, degree in indegree.items() if degree == 0]
    done = 0
    while ready:
        name = ready.pop()
        done += 1
        for after in edges.get(name, []):
            indegree[after] -= 1
            if indegree[after] == 0:
                ready.append(after)
    return done != len(indegree)


@resource_rule(
    id="volcano-job-tasks",
    severity=ERROR,
    source=(ADMIT_JOB + "#L121-L242", ADMIT_JOB + "#L339-L421"),
    title="A Volcano Job's tasks pass Volcano's job webhook",
    why="Volcano's job webhook refuses a Job with no tasks, two tasks of one name, a task "
    "whose minAvailable is above its replicas, a task with a NUMA topologyPolicy whose "
    "containers do not all request a whole number of CPUs, a job name that is not a "
    "qualified name (63 characters at most) or a pod name <job>-<task>-<index> that is not "
    "one, and dependsOn that names a task the Job lacks or forms a cycle: the Job is never "
    "created.",
    fix="Give every task its own name, minAvailable at most its replicas, keep the job and "
    "task names short enough for <job>-<task>-<index> to fit 63 characters, and order tasks "
    "with dependsOn that names tasks of the Job without a cycle.",
    kinds=("Job",),
    applies=_volcano_job,
)
def volcano_job_tasks(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    tasks = dicts(spec.get("tasks"))
    if not tasks:
        yield Violation("the Job has no tasks: 'No task specified in job spec'", ("spec",))
        return
    for error in names.qualified_name(doc.name):
        yield Violation(
            f"job name {doc.name!r} is not a qualified name: {error}", ("metadata", "name")
        )
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        name = str(task.get("name", ""))
        at = ("spec", "tasks", index)
        if name in seen:
            yield Violation(f"duplicated task name {name}", (*at, "name"))
        seen.add(name)
        replicas, least = task.get("replicas"), task.get("minAvailable")
        if is_int(least) and is_int(replicas) and least > replicas:
            yield Violation(
                f"task {name}: minAvailable {least} is greater than its {replicas} replicas",
                (*at, "minAvailable"),
            )
        yield from _topology_policy_cpus(task, at)
        pod = f"{doc.name}-{name}-{index}"
        for error in names.qualified_name(pod):
            yield Violation(f"pod name {pod!r} is not a qualified name: {error}", (*at, "name"))
    if any(mapping(t.get("dependsOn")).get("name") for t in tasks) and _not_dag(tasks):
        yield Violation(
            "dependsOn names a task the Job does not have, or the tasks depend on each other "
            "in a cycle: not a directed acyclic graph",
            ("spec", "tasks"),
        )


def _topology_problems(topology: Any) -> Iterator[str]:
    topology = mapping(topology)
    if topology.get("highestTierAllowed") is not None and topology.get("highestTierName"):
        yield "must not specify 'highestTierAllowed' and 'highestTierName' simultaneously"


@resource_rule(
    id="volcano-network-topology",
    severity=ERROR,
    source=(
        ADMIT_JOB + "#L311-L337",
        VOLCANO + "pkg/webhooks/admission/podgroups/validate/validate_podgroup.go#L120-L132",
    ),
    title="Volcano network-topology and partition settings are consistent",
    why="Volcano's job and PodGroup webhooks refuse a networkTopology (of the Job, a task's "
    "partitionPolicy, a PodGroup or one of its subGroupPolicy entries) that sets both "
    "highestTierAllowed and highestTierName, and a partitionPolicy whose totalPartitions or "
    "partitionSize is not positive, whose totalPartitions x partitionSize is not the task's "
    "replicas, or whose minPartitions x partitionSize is not the task's minAvailable.",
    fix="Bound the topology by tier number or by tier name, not both, and size partitions so "
    "that totalPartitions x partitionSize = replicas (minPartitions x partitionSize = "
    "minAvailable).",
    kinds=("Job", "PodGroup"),
    applies=_volcano_job_or_group,
)
def volcano_network_topology(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    for why in _topology_problems(spec.get("networkTopology")):
        yield Violation(f"networkTopology: {why}", ("spec", "networkTopology"))
    for index, policy in enumerate(dicts(spec.get("subGroupPolicy"))):
        for why in _topology_problems(policy.get("networkTopology")):
            yield Violation(
                f"subGroupPolicy {policy.get('name')}: networkTopology {why}",
                ("spec", "subGroupPolicy", index, "networkTopology"),
            )
    for index, task in enumerate(dicts(spec.get("tasks"))):
        policy = task.get("partitionPolicy")
        if not isinstance(policy, dict):
            continue
        at = ("spec", "tasks", index, "partitionPolicy")
        name = task.get("name")
        total, size = policy.get("totalPartitions"), policy.get("partitionSize")
        replicas, least = task.get("replicas", 0), task.get("minAvailable")
        least_parts = policy.get("minPartitions") or 0
        if not is_int(total) or not is_int(size) or not is_int(replicas):
            continue
        if total <= 0:
            yield Violation(f"task {name}: totalPartitions must be greater than 0", at)
        elif size <= 0:
            yield Violation(f"task {name}: partitionSize must be greater than 0", at)
        elif replicas != total * size:
            yield Violation(
                f"task {name}: replicas {replicas} is not totalPartitions x partitionSize "
                f"({total} x {size})",
                at,
            )
        elif (
            is_int(least)
            and is_int(least_parts)
            and least_parts > 0
            and least != least_parts * size
        ):
            yield Violation(
                f"task {name}: minAvailable {least} is not minPartitions x partitionSize "
                f"({least_parts} x {size})",
                at,
            )
        for why in _topology_problems(policy.get("networkTopology")):
            yield Violation(f"task {name}: partitionPolicy.networkTopology {why}", at)


@resource_rule(
    id="volcano-plugin-known",
    severity=ERROR,
    source=(
        ADMIT_JOB + "#L188-L195",
        VOLCANO + "pkg/controllers/job/plugins/factory.go#L33-L42",
    ),
    title="A Volcano Job enables only plugins Volcano has",
    why="Volcano's job webhook refuses a Job whose spec.plugins names a plugin it does not "
    "register ('unable to find job plugin'); the plugins are ssh, env, svc, tensorflow, mpi, "
    "pytorch, hcclrank and ray.",
    fix="Use one of Volcano's job plugins (their names are lower case).",
    kinds=("Job",),
    applies=_volcano_job,
)
def volcano_plugin_known(doc: Document, ctx: Context) -> Iterator[Violation]:
    for name in mapping(mapping(doc.obj.get("spec")).get("plugins")):
        if name not in JOB_PLUGINS:
            yield Violation(
                f"no job plugin {name!r} (Volcano has {', '.join(JOB_PLUGINS)})",
                ("spec", "plugins", name),
            )


def _hierarchy_problems(notes: dict[str, Any]) -> Iterator[str]:
    hierarchy, weights = notes.get(HIERARCHY), notes.get(HIERARCHY_WEIGHTS)
    if not hierarchy and not weights:
        return
    paths, parts = str(hierarchy or "").split("/"), str(weights or "").split("/")
    if len(paths) != len(parts):
        yield f"{HIERARCHY} and {HIERARCHY_WEIGHTS} have different lengths"
        return
    for part in parts:
        try:
            weight = float(part)
        except ValueError:
            yield f"{part!r} in {HIERARCHY_WEIGHTS} is not a number"
            return
        if weight <= 0:
            yield f"{part} in {HIERARCHY_WEIGHTS} must be larger than 0"
            return


@resource_rule(
    id="volcano-queue-admission",
    severity=ERROR,
    source=VALIDATE_QUEUE + "#L132-L293",
    title="Volcano queues pass Volcano's queue webhook",
    why="Volcano's queue webhook refuses a Queue whose guarantee names a resource without a "
    "deserved amount at least as large, whose deserved is above its capability, whose "
    "volcano.sh/hierarchy and hierarchy-weights annotations differ in length or hold a weight "
    "that is not a positive number, or whose parent is the queue itself: the queue is not "
    "created and jobs sent to it wait.",
    fix="Keep guarantee <= deserved <= capability for every resource, and give one positive "
    "weight per hierarchy level.",
    kinds=("Queue",),
    applies=_volcano_queue,
)
def volcano_queue_admission(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    capability, deserved = mapping(spec.get("capability")), mapping(spec.get("deserved"))
    guarantee = mapping(mapping(spec.get("guarantee")).get("resource"))
    for name, amount in guarantee.items():
        at = ("spec", "guarantee", "resource", name)
        if name not in deserved:
            yield Violation(f"guarantee[{name}]={amount} but no deserved[{name}]", at)
            continue
        floor, given = quantity.parse(amount), quantity.parse(deserved[name])
        if floor is not None and given is not None and given < floor:
            yield Violation(f"deserved[{name}]={deserved[name]} is below guarantee {amount}", at)
    for name, amount in deserved.items():
        most, given = quantity.parse(capability.get(name)), quantity.parse(amount)
        if name in capability and most is not None and given is not None and given > most:
            yield Violation(
                f"deserved[{name}]={amount} is above capability[{name}]={capability[name]}",
                ("spec", "deserved", name),
            )
    for why in _hierarchy_problems(mapping(doc.metadata.get("annotations"))):
        yield Violation(why, ("metadata", "annotations"))
    if spec.get("parent") == doc.name:
        yield Violation(f"queue {doc.name} cannot use itself as parent", ("spec", "parent"))


def _volcano_queues(ctx: Context) -> tuple[dict[str, Document], dict[str, list[str]]]:
    queues = {d.name: d for d in ctx.of_kind("Queue") if _volcano_queue(d)}
    children: dict[str, list[str]] = {}
    for name, queue in queues.items():
        parent = mapping(queue.obj.get("spec")).get("parent")
        if parent:
            children.setdefault(str(parent), []).append(name)
    return queues, children


@resource_rule(
    id="volcano-queue-leaf",
    severity=ERROR,
    source=(ADMIT_JOB + "#L201-L228", VALIDATE_QUEUE + "#L373-L408"),
    title="Volcano Jobs go to leaf queues, and queues to parents that exist",
    why="Volcano's job webhook refuses a Job sent to the root queue or to a queue that has "
    "child queues ('can only submit job to leaf queue'), and the queue webhook refuses a "
    "Queue whose parent does not exist: the Job or Queue is never created.",
    fix="Send the Job to a leaf queue, and create parent queues before (or with) their children.",
    kinds=("Job", "Queue"),
)
def volcano_queue_leaf(doc: Document, ctx: Context) -> Iterator[Violation]:
    queues, children = ctx.memo("volcano-queues", lambda: _volcano_queues(ctx))
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "Job" and _volcano_job(doc):
        name = str(spec.get("queue") or "default")
        if name == "root":
            yield Violation("a Job cannot be submitted to the root queue", ("spec", "queue"))
        elif children.get(name):
            yield Violation(
                f"queue {name} has child queues ({', '.join(sorted(children[name]))}): only "
                "leaf queues take jobs",
                ("spec", "queue"),
            )
    elif doc.kind == "Queue" and _volcano_queue(doc):
        parent = spec.get("parent")
        if parent and parent not in ("root", doc.name) and len(queues) > 1 and parent not in queues:
            yield Violation(
                f"parent queue {parent!r} is not a Volcano Queue of the render: the webhook "
                "refuses the queue",
                ("spec", "parent"),
            )


@resource_rule(
    id="volcano-queue-children-share",
    severity=ERROR,
    source=(VALIDATE_QUEUE + "#L111-L116", VALIDATE_QUEUE + "#L593-L631"),
    title="A Volcano queue's children deserve and guarantee no more than it does",
    why="On creating a queue under a parent other than root, Volcano's queue webhook adds the "
    "deserved and the guaranteed resources of all the parent's children and refuses the "
    "queue once a sum exceeds the parent's own, a resource the parent leaves out counting as "
    "zero (Resource.LessPartly with Zero): the child queue is never created and its jobs "
    "have no queue.",
    fix="Give the parent queue deserved (and guarantee) amounts that cover its children's, "
    "for every resource they list, or lower the children's.",
    kinds=("Queue",),
    applies=_volcano_queue,
)
def volcano_queue_children_share(doc: Document, ctx: Context) -> Iterator[Violation]:
    queues, children = ctx.memo("volcano-queues", lambda: _volcano_queues(ctx))
    names = children.get(doc.name)
    if not names or doc.name == "root":
        return
    spec = mapping(doc.obj.get("spec"))
    own = {
        "deserved": mapping(spec.get("deserved")),
        "guarantee": mapping(mapping(spec.get("guarantee")).get("resource")),
    }
    for field_name, limits in own.items():
        totals: dict[str, Any] = {}
        for child in names:
            child_spec = mapping(queues[child].obj.get("spec"))
            amounts = child_spec.get(field_name) if field_name == "deserved" else None
            if field_name == "guarantee":
                amounts = mapping(child_spec.get("guarantee")).get("resource")
            for resource, amount in mapping(amounts).items():
                value = quantity.parse(amount)
                if value is not None:
                    totals[resource] = totals.get(resource, 0) + value
        for resource, total in sorted(totals.items()):
            limit = quantity.parse(limits.get(resource)) if resource in limits else 0
            if limit is not None and total > limit:
                have = f"{limits[resource]}" if resource in limits else "none"
                yield Violation(
                    f"its child queues ({', '.join(sorted(names))}) together have "
                    f"{field_name} {resource} {_amount(total)}, and queue {doc.name} has "
                    f"{have}: the webhook refuses the child that brings the sum above it",
                    ("spec", field_name),
                )


def _amount(value: Any) -> str:
    return str(int(value)) if value == int(value) else f"{float(value):g}"


def _budget_problem(value: Any) -> str | None:
    """validateIntPercentageStr: an integer above 0, or a percentage from 1% to 99%."""
    text = str(value)
    if text.lstrip("-").isdigit():
        return None if int(text) > 0 else "is not a positive integer"
    number = text.replace("%", "")
    if not number.lstrip("-").isdigit():
        return "is neither an integer nor a percentage"
    return None if 0 < int(number) < 100 else "is not a percentage from 1% to 99%"


@pod_rule(
    id="volcano-pod-budget",
    severity=ERROR,
    source=ADMIT_POD,
    title="A Volcano pod sets one valid disruption budget",
    why="Volcano's pod webhook validates pods that the volcano scheduler schedules and no "
    "Volcano Job owns (no scheduling.k8s.io/group-name): volcano.sh/jdb-min-available and "
    "volcano.sh/jdb-max-unavailable are exclusive, and each is a positive integer or a "
    "percentage from 1% to 99%. The controller's object is accepted, but every pod CREATE is "
    "refused, so no replica ever starts.",
    fix="Keep one of the two annotations, with a positive integer or a percentage below 100%.",
    applies=sets_any(*POD_BUDGETS),
)
def volcano_pod_budget(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    notes = pod.annotations
    grouped = pod.doc.kind in GROUPING_KINDS or pod.doc.api_version.startswith("batch.volcano.sh/")
    if pod.spec.get("schedulerName") != "volcano" or grouped or POD_GROUP_ANNOTATION in notes:
        return
    at = (*pod.path[:-1], "metadata", "annotations")
    present = [key for key in POD_BUDGETS if key in notes]
    for key in present:
        problem = _budget_problem(notes[key])
        if problem:
            yield Violation(
                f"{key} {str(notes[key])!r} {problem}: Volcano refuses the {pod.role} pods",
                (*at, key),
            )
            return
    if len(present) > 1:
        yield Violation(
            f"both {' and '.join(present)}: Volcano refuses the {pod.role} pods (one at a time)",
            (*at, present[-1]),
        )


RAY_PLUGIN = VOLCANO + "pkg/controllers/job/plugins/distributed-framework/ray/ray.go"
# The ray plugin's flags and their defaults (addFlags); the last three are integers.
RAY_PLUGIN_FLAGS = {
    "head": "head",
    "headContainer": "head",
    "worker": "worker",
    "workerContainer": "worker",
    "port": "6379",
    "dashboardPort": "8265",
    "clientPort": "10001",
}


def _ray_plugin_flags(arguments: Any) -> tuple[dict[str, str], str | None] | None:
    """What the ray plugin's flag.Parse (ContinueOnError) leaves set, and the word it stopped
    at with an error; None when an argument is templated."""
    values = dict(RAY_PLUGIN_FLAGS)
    words = [str(w) for w in arguments or []]
    if any("{{" in w or "$(" in w for w in words):
        return None
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--" or word == "-" or not word.startswith("-"):
            break
        name, sep, value = word.lstrip("-").partition("=")
        if name not in values:
            return values, word
        if not sep:
            if index + 1 >= len(words):
                return values, word
            index += 1
            value = words[index]
        if name in ("port", "dashboardPort", "clientPort") and not value.lstrip("-").isdigit():
            return values, word
        values[name] = value
        index += 1
    return values, None


@resource_rule(
    id="volcano-ray-plugin",
    severity=ERROR,
    source=(
        RAY_PLUGIN + "#L98-L130",
        VOLCANO + "pkg/controllers/job/job_controller_actions.go#L471-L475",
    ),
    title="A Volcano Job with the ray plugin has the head and worker tasks it looks for",
    why="Volcano's ray plugin, on every pod it creates, looks up the task named head (or "
    "--head): when the Job has none it returns an error, the job controller creates no pod "
    "and the Job waits forever. In the head task it replaces the command of the container "
    "named head (--headContainer) with 'sh -c ray start --head --block ...' and opens the "
    "GCS, dashboard and client ports; in the worker task (--worker) it replaces the command "
    "of the container named worker (--workerContainer) with 'ray start --block "
    "--address=<head-0>:6379'. Other containers are left alone without a word, a command "
    "given to a matched container never runs, and an unknown plugin flag leaves the rest "
    "at their defaults.",
    fix="Name the tasks head and worker and their Ray containers head and worker (or pass "
    "--head, --headContainer, --worker, --workerContainer), leave their command to the "
    "plugin, and keep one head replica.",
    when={
        "error": "the Job has no head task: no pod is ever created",
        "warning": "containers or tasks the plugin does not configure, commands it replaces, "
        "flags it cannot parse, more than one head",
    },
    kinds=("Job",),
    applies=_volcano_job,
)
def volcano_ray_plugin(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    plugins = mapping(spec.get("plugins"))
    if "ray" not in plugins:
        return
    parsed = _ray_plugin_flags(plugins.get("ray"))
    if parsed is None:
        return
    flags, stopped = parsed
    at = ("spec", "plugins", "ray")
    if stopped is not None:
        yield Violation(
            f"the ray plugin cannot parse {stopped!r} (flags: "
            f"{', '.join('--' + f for f in RAY_PLUGIN_FLAGS)}): it uses the defaults from there on",
            at,
            severity=WARNING,
        )
    tasks = dicts(spec.get("tasks"))
    names = [str(t.get("name")) for t in tasks]
    if flags["head"] not in names:
        yield Violation(
            f"the ray plugin's head task is {flags['head']!r}, which the Job does not have "
            f"({', '.join(names)}): Volcano creates none of its pods",
            at,
        )
        return
    for index, task in enumerate(tasks):
        role = {flags["head"]: "head", flags["worker"]: "worker"}.get(str(task.get("name")))
        if role is None:
            continue
        wanted = flags[f"{role}Container"]
        template = mapping(mapping(task.get("template")).get("spec"))
        containers = dicts(template.get("containers"))
        base = ("spec", "tasks", index)
        if role == "head" and is_int(task.get("replicas")) and task["replicas"] > 1:
            yield Violation(
                f"head task {task.get('name')} has {task['replicas']} replicas: each starts its "
                "own Ray head, the workers join head-0, and the head Service spreads clients "
                "over all",
                (*base, "replicas"),
                severity=WARNING,
            )
        positions = [i for i, c in enumerate(containers) if c.get("name") == wanted]
        if containers and not positions:
            yield Violation(
                f"{role} task {task.get('name')} has no container named {wanted!r} "
                f"({', '.join(str(c.get('name')) for c in containers)}): the ray plugin starts "
                "no Ray there",
                (*base, "template", "spec", "containers"),
                severity=WARNING,
            )
        for position in positions:
            container = containers[position]
            for field in ("command", "args"):
                if container.get(field):
                    yield Violation(
                        f"{role} container {wanted}: the ray plugin replaces its command with "
                        f"'sh -c ray start ...', so its {field} never runs",
                        (*base, "template", "spec", "containers", position, field),
                        severity=WARNING,
                    )


PLUGINS_DIR = VOLCANO + "pkg/controllers/job/plugins/"
# The flags each job plugin's addFlags defines (Go flag.FlagSet, ContinueOnError), by type.
PLUGIN_FLAGS: dict[str, dict[str, str]] = {
    "tensorflow": {
        "ps": "string",
        "worker": "string",
        "chief": "string",
        "evaluator": "string",
        "port": "int",
    },
    "pytorch": {
        "master": "string",
        "worker": "string",
        "port": "int",
        "wait-master-enabled": "bool",
        "wait-master-timeout": "int",
        "wait-master-image": "string",
    },
    "mpi": {"master": "string", "worker": "string", "port": "int"},
    "ssh": {
        "ssh-key-file-path": "string",
        "ssh-private-key": "string",
        "ssh-public-key": "string",
        "ssh-port": "int",
    },
    "svc": {"publish-not-ready-addresses": "bool", "disable-network-policy": "bool"},
}
PLUGIN_DEFAULTS: dict[str, dict[str, str]] = {
    "tensorflow": {"ps": "ps", "worker": "worker", "chief": "chief", "evaluator": "evaluator"},
    "pytorch": {"master": "master", "worker": "worker"},
}
_GO_BOOLS = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}


def _go_int(text: str) -> bool:
    """strconv.ParseInt(text, 0, 64) as flag.IntVar uses it (decimal, 0x, 0o, 0b, _)."""
    try:
        int(text.replace("_", ""), 0)
    except ValueError:
        return False
    return True


def go_flags(words: list[str], types: dict[str, str]) -> tuple[dict[str, str], str | None, int]:
    """Go's FlagSet.Parse over a plugin's arguments: the values it sets, the problem it
    stops at ('flag provided but not defined', a bad value, a missing one) or None, and the
    index where it stopped (a word that is no flag ends the flags silently)."""
    values: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if len(word) < 2 or not word.startswith("-"):
            return values, None, index
        name = word[2:] if word.startswith("--") else word[1:]
        if word == "--":
            return values, None, index + 1
        if not name or name.startswith("-") or name.startswith("="):
            return values, f"bad flag syntax: {word}", index
        name, sep, value = name.partition("=")
        kind = types.get(name)
        if kind is None:
            return values, f"flag provided but not defined: -{name}", index
        if kind == "bool":
            if sep and value not in _GO_BOOLS:
                return values, f"invalid boolean value {value!r} for -{name}", index
            values[name] = value if sep else "true"
            index += 1
            continue
        if not sep:
            if index + 1 >= len(words):
                return values, f"flag needs an argument: -{name}", index
            index += 1
            value = words[index]
        if kind == "int" and not _go_int(value):
            return values, f"invalid value {value!r} for flag -{name}", index
        values[name] = value
        index += 1
    return values, None, index


@resource_rule(
    id="volcano-plugin-flags",
    severity=ERROR,
    source=(
        PLUGINS_DIR + "distributed-framework/pytorch/pytorch.go#L74-L97",
        PLUGINS_DIR + "distributed-framework/tensorflow/tensorflow.go#L59-L68",
        PLUGINS_DIR + "distributed-framework/tensorflow/tensorflow.go#L137-L167",
        PLUGINS_DIR + "distributed-framework/mpi/mpi.go#L66-L74",
        PLUGINS_DIR + "ssh/ssh.go#L56-L61",
        PLUGINS_DIR + "ssh/ssh.go#L249-L260",
        PLUGINS_DIR + "svc/svc.go#L62-L72",
        PLUGINS_DIR + "env/env.go#L35-L39",
    ),
    title="A Volcano Job's plugin arguments are flags the plugin parses",
    why="Each job plugin parses its spec.plugins arguments with Go's flag package "
    "(ContinueOnError): an unknown flag, a value that is not a number (or boolean) or a flag "
    "without its value stops the parse with only a log line in the controller, and so does "
    "the first word that is no flag (a bool flag takes no separate value: "
    "'--wait-master-enabled true' ends there); every flag from there on keeps its default. "
    "The env plugin takes no arguments, and the ssh plugin replaces a port outside 1-65535 "
    "by 22. The pytorch plugin finds the master task by name (master unless --master): "
    "without it, it adds neither MASTER_ADDR, MASTER_PORT, WORLD_SIZE nor RANK to any pod and "
    "torch.distributed cannot start. The tensorflow plugin lists only the tasks named ps, "
    "worker, chief and evaluator (or --ps ...) in TF_CONFIG: a pod of another task gets a "
    "task type its cluster does not have.",
    fix="Write each plugin's flags as --name=value with the names its addFlags defines, put "
    "no other words among them, and name the tasks the plugin looks for (or pass their names).",
    when={
        "error": "the pytorch plugin's master task is not in the Job: no pod gets its "
        "distributed environment",
        "warning": "arguments the plugin cannot parse or ignores, ports it replaces, tasks the "
        "tensorflow or pytorch plugin leaves out",
    },
    kinds=("Job",),
    applies=_volcano_job,
)
def volcano_plugin_flags(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    plugins = mapping(spec.get("plugins"))
    names = [str(t.get("name")) for t in dicts(spec.get("tasks"))]
    for plugin, arguments in plugins.items():
        if not isinstance(arguments, list):
            continue
        words = [str(w) for w in arguments]
        if any("{{" in w or "$(" in w for w in words):
            continue
        at = ("spec", "plugins", plugin)
        if plugin == "env" and words:
            yield Violation(
                f"the env plugin takes no arguments; {' '.join(words)!r} is ignored",
                at,
                severity=WARNING,
            )
            continue
        types = PLUGIN_FLAGS.get(plugin)
        if types is None:
            continue
        values, problem, stopped = go_flags(words, types)
        flags = ", ".join("--" + f for f in types)
        if problem:
            yield Violation(
                f"the {plugin} plugin cannot parse {words[stopped]!r} ({problem}; it has "
                f"{flags}): it logs the error and keeps the defaults of every flag from there on",
                at,
                severity=WARNING,
            )
        elif stopped < len(words):
            yield Violation(
                f"the {plugin} plugin stops at {words[stopped]!r}, which is no flag: "
                f"{' '.join(words[stopped:])!r} is ignored and those flags keep their defaults"
                + (
                    " (a bool flag takes --name=value)"
                    if stopped and types.get(words[stopped - 1].lstrip("-")) == "bool"
                    else ""
                ),
                at,
                severity=WARNING,
            )
        if plugin == "ssh" and "ssh-port" in values:
            port = int(values["ssh-port"].replace("_", ""), 0)
            if not 0 < port <= 65535:
                yield Violation(
                    f"ssh-port {values['ssh-port']} is not a port: the ssh plugin writes port 22 "
                    "into the ssh config instead",
                    at,
                    severity=WARNING,
                )
        if plugin not in PLUGIN_DEFAULTS or not names:
            continue
        roles = {
            **PLUGIN_DEFAULTS[plugin],
            **{k: v for k, v in values.items() if k in PLUGIN_DEFAULTS[plugin]},
        }
        if plugin == "pytorch":
            if roles["master"] not in names:
                yield Violation(
                    f"the pytorch plugin's master task is {roles['master']!r}, which the Job "
                    f"does not have ({', '.join(names)}): no pod gets MASTER_ADDR, "
                    "MASTER_PORT, WORLD_SIZE or RANK",
                    at,
                )
                continue
            others = [n for n in names if n not in (roles["master"], roles["worker"])]
            if others:
                yield Violation(
                    f"the pytorch plugin counts only tasks {roles['master']!r} and "
                    f"{roles['worker']!r}: task {others[0]!r} gets no RANK and is not in "
                    "WORLD_SIZE",
                    at,
                    severity=WARNING,
                )
        elif plugin == "tensorflow":
            tasks = dicts(spec.get("tasks"))
            if len(tasks) == 1 and tasks[0].get("replicas", 1) == 1:
                continue  # a stand-alone job: the plugin writes no TF_CONFIG
            others = [n for n in names if n not in roles.values()]
            if others:
                yield Violation(
                    f"the tensorflow plugin's roles are tasks {', '.join(roles.values())}: "
                    f"task {others[0]!r} is left out of TF_CONFIG's cluster while its pods get "
                    f"task type {others[0]!r}",
                    at,
                    severity=WARNING,
                )
