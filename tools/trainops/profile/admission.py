"""The cluster's admission gate for runs: a ValidatingAdmissionPolicy and its binding.

`kubectl apply` bypasses CI, so what `trainops validate` refuses in a run the API
server refuses too. The policy matches every kind that makes pods (the cluster's
job kinds, batch Jobs and CronJobs, JobSets, Pods, Deployments, StatefulSets,
ReplicaSets and DaemonSets) in every namespace labelled `trainops.dev/tenant`
(each team's, and the platform's `training`) and checks it against the parameters
of its namespace (the `trainops-runs` ConfigMap there, `profile.tenancy.params`).
An object a job controller made (a controller owner reference to a job kind: a
job's pods, a JobSet's or CronJob's Jobs) was checked as its owner; the policy
skips it, so what the operators add to their pods (the Training Operator's init
container) is theirs to choose.

- accelerators (GPUs, RDMA devices, DRA claims) are requested only through a kind
  the queue admits; a bare Pod, Deployment, StatefulSet, ReplicaSet or DaemonSet
  asking for one would run outside every quota;

- a team's job carries the team's label (`trainops.dev/team`), so a job written for
  one team and pointed at another's namespace is refused there;
- it queues in its namespace's queue (Kueue's queue-name label, on a CronJob's job
  template; Volcano's schedulingPolicy.queue, for a TrainJob the queue annotation
  of its runtime patch, for other kinds the pod templates' queue annotation) and
  asks for a priority its team may use;
- its pods attach only the cluster's training network, from their own namespace;
- its images come from the cluster's registries;
- its pods take no privilege: the fabric needs none (host namespaces, privileged
  containers, added capabilities and hostPath volumes are refused), and no GPUs but
  those they request (NVIDIA_VISIBLE_DEVICES is refused unless void or none). A
  TrainJob's pods are made by controllers the policy skips, so what it sets on
  them is checked on the TrainJob: its trainer's and initializers' variables and
  the pod specs of its runtime patches;
- its pods keep the namespace's default service account, without its token, and
  take their identity from their controller (no controller labels, hostname or
  subdomain of their own, a TrainJob's runtime patches included); they read no job's
  SSH key (the MPI controllers' `<job>-ssh` and `<trainjob>-mpi-ssh-auth` Secrets) and
  claim devices through ResourceClaimTemplates only (a claim named directly shares
  another's devices);
- its pods give back their GPUs within 900 s of a preemption (grace period);
- its pods use the scheduler the queue works with (kube-scheduler under Kueue,
  volcano under Volcano);
- the scheduler places its pods: no nodeName, no toleration of every taint;
- it sees its own checkpoints: the checkpoint claim is mounted only with
  subPathExpr $(TRAINER_JOB_NAME), from the job label the controller sets;
- its volumes are claims, ephemeral claims, emptyDirs, config, secrets, projections
  without a service-account token and image volumes from the registries: no volume
  names a storage server or driver inline; on Kueue clusters pods set no
  priorityClassName (the queue's label is the priority);
- its pods keep the cluster's default network (no v1.multus-cni.io/default-network).

A pod's update can still change its containers' images, its labels and tolerations and
add ephemeral containers: `trainops-runs-pod-updates` checks what such an update changes
(the image's registry; an ephemeral container's privilege, GPUs, keys and checkpoint
mounts; a controller's label; a toleration of every taint), so `kubectl set image` or
`kubectl debug` on a job's pod meets the gate its template met.

Another policy, `trainops-runs-network`, keeps the jobs of a tenant namespace apart:
a NetworkPolicy there opens a job's pods to that job's pods only (or the metrics port to
all) and isolates no egress.

The binding denies; `trainops validate` evaluates the same objects offline
(`trainops.admission.vap`), so a run the API server would refuse fails CI first.
"""

from __future__ import annotations

from typing import Any

from trainops.profile.model import ClusterProfile
from trainops.profile.tenancy import (
    JOB_LABELS,
    METRICS_PORT,
    METRICS_PORT_NUMBER,
    PARAMS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    REGISTRY_BOUNDARIES,
    REPLICA_SERVICE_NAME,
    SERVICE_NAMED_KINDS,
    TEAM_LABEL,
    TENANT_LABEL,
    VOLCANO_QUEUE,
)

POLICY = "trainops-runs"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
# Multus replaces the pod's cluster network with the attachment this names
# (multus-cni v4 pkg/k8sclient/k8sclient.go, docs/how-to-use.md).
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
# Volcano puts a pod in the PodGroup these name instead of its own job's (volcano v1.13.0
# pkg/scheduler/api/job_info.go getJobID; the pod controller makes none for such a pod,
# pkg/controllers/podgroup/pg_controller.go), so a pod naming another job's group joins
# that gang and holds a place its own workers never take.
GROUP_NAMES = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


# Kinds whose pods the queue admits, by API group; the Kubeflow ones as the profile
# installs them. Pods are checked when made; what their updates can change, by
# `trainops-runs-pod-updates` (a refused finalizer update would leave them stuck).
QUEUED = ("Job", "CronJob", "JobSet", "PyTorchJob", "MPIJob", "TrainJob")
UNQUEUED = {"": ["pods"], "apps": ["deployments", "statefulsets", "replicasets", "daemonsets"]}
# A controller owner of these kinds made the object from a template the policy checked.
JOB_OWNERS = ("Job", "CronJob", "JobSet", "PyTorchJob", "MPIJob", "TrainJob")


def _resources(p: ClusterProfile) -> list[dict[str, Any]]:
    rules: list[tuple[str, list[str], list[str]]] = []
    kubeflow = (["pytorchjobs"] if p.trainer_v1 else []) + (["mpijobs"] if p.uses_mpi else [])
    if kubeflow:
        rules.append(("kubeflow.org", kubeflow, ["CREATE", "UPDATE"]))
    if p.trainer_v2:
        rules.append(("trainer.kubeflow.org", ["trainjobs"], ["CREATE", "UPDATE"]))
    rules.append(("batch", ["jobs", "cronjobs"], ["CREATE", "UPDATE"]))
    rules.append(("jobset.x-k8s.io", ["jobsets"], ["CREATE", "UPDATE"]))
    rules.append(("", UNQUEUED[""], ["CREATE"]))
    rules.append(("apps", UNQUEUED["apps"], ["CREATE", "UPDATE"]))
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": operations,
            "resources": resources,
        }
        for group, resources, operations in rules
    ]


def _kinds(kinds: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{k}'" for k in kinds) + "]"


def _without_annotations(keys: tuple[str, ...]) -> str:
    """CEL: no pod template and no TrainJob runtime patch carries any of `keys`."""
    in_template = " && ".join(f"!('{k}' in t.metadata.annotations)" for k in keys)
    in_patch = " && ".join(f"!('{k}' in m)" for k in keys)
    return (
        "variables.templates.all(t, !has(t.metadata) || !has(t.metadata.annotations) || "
        f"{in_template}) && variables.patchAnnotations.all(js, js.all(m, {in_patch}))"
    )


def _has(path: str) -> str:
    """`has()` of every step of a dotted path below `object`: a.b.c -> has(a.b) && has(a.b.c)."""
    steps = path.split(".")
    return " && ".join(f"has({'.'.join(steps[: i + 1])})" for i in range(1, len(steps)))


RUNTIME_POD = (
    "has(p.trainingRuntimeSpec) && has(p.trainingRuntimeSpec.template) "
    "&& has(p.trainingRuntimeSpec.template.spec) "
    "&& has(p.trainingRuntimeSpec.template.spec.replicatedJobs)"
)
KIND = "request.kind.kind"
# A container's ports take the metrics name only with the metrics number.
METRICS_NUMBERED = (
    f"!has(c.ports) || c.ports.all(pt, !has(pt.name) || pt.name != '{METRICS_PORT}' "
    f"|| pt.containerPort == {METRICS_PORT_NUMBER})"
)
# The job template of a CronJob, the pod templates of each kind.
JOB_TEMPLATE = (
    "has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) "
    "&& has(object.spec.jobTemplate.spec.template)"
)
TEMPLATES = (
    f"{KIND} == 'Pod' ? [object] : "
    f"{KIND} == 'CronJob' ? ({JOB_TEMPLATE} ? [object.spec.jobTemplate.spec.template] : []) : "
    f"{KIND} == 'JobSet' ? (has(object.spec.replicatedJobs) ? object.spec.replicatedJobs"
    ".filter(j, has(j.template) && has(j.template.spec) && has(j.template.spec.template))"
    ".map(j, j.template.spec.template) : []) : "
    "has(object.spec.template) ? [object.spec.template] : "
    "variables.replicas.filter(r, has(r.template)).map(r, r.template)"
)
# Who makes pods and jobs for an owner: kube-controller-manager's job and cronjob
# controllers (as their own service accounts under --use-service-account-credentials, as
# kube-controller-manager without it) and the operators the cluster installs.
KUBE_JOB_CONTROLLERS = (
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kube-system:cronjob-controller",
    "system:kube-controller-manager",
)


def _match_conditions(controllers: list[str]) -> list[tuple[str, str]]:
    """Skip what a job controller made from a template the policy already checked: an
    owner reference alone proves nothing (anyone may write one, and the garbage collector
    acts on it only later), so the request must also come from a controller."""
    users = "[" + ", ".join(f"'{u}'" for u in [*KUBE_JOB_CONTROLLERS, *controllers]) + "]"
    return [
        (
            "made-by-no-job-controller",
            "!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists("
            f"o, has(o.controller) && o.controller && o.kind in {_kinds(JOB_OWNERS)}) || "
            f"!(request.userInfo.username in {users})",
        )
    ]


def _variables(p: ClusterProfile) -> list[tuple[str, str]]:
    accelerator = "k.startsWith('nvidia.com/')" + (
        f" || k == '{p.rdmaResource}'" if p.rdmaResource else ""
    )
    return [
        ("labels", "has(object.metadata.labels) ? object.metadata.labels : {}"),
        # Kueue reads the queue of the Jobs a CronJob makes from its job template.
        (
            "jobLabels",
            f"{KIND} == 'CronJob' ? ({_has('object.spec.jobTemplate.metadata.labels')} ? "
            "object.spec.jobTemplate.metadata.labels : {}) : variables.labels",
        ),
        (
            "replicas",
            "has(object.spec.pytorchReplicaSpecs) ? object.spec.pytorchReplicaSpecs.map(k, "
            "object.spec.pytorchReplicaSpecs[k]) : has(object.spec.mpiReplicaSpecs) ? "
            "object.spec.mpiReplicaSpecs.map(k, object.spec.mpiReplicaSpecs[k]) : []",
        ),
        ("templates", TEMPLATES),
        # The fieldRef that gives the pods of this kind their job's name ('' for none).
        ("jobNameField", JOB_NAME_FIELD),
        ("podSpecs", "variables.templates.filter(t, has(t.spec)).map(t, t.spec)"),
        (
            "containers",
            "variables.podSpecs.map(s, (has(s.containers) ? s.containers : []) + "
            "(has(s.initContainers) ? s.initContainers : []))",
        ),
        (
            "accelerators",
            "variables.podSpecs.exists(s, has(s.resourceClaims) && size(s.resourceClaims) > 0) "
            "|| variables.containers.exists(cs, cs.exists(c, has(c.resources) && "
            f"((has(c.resources.limits) && c.resources.limits.exists(k, {accelerator})) || "
            f"(has(c.resources.requests) && c.resources.requests.exists(k, {accelerator})))))",
        ),
        (
            "attachments",
            "variables.templates.filter(t, has(t.metadata) && has(t.metadata.annotations) "
            f"&& '{NETWORKS}' in t.metadata.annotations)"
            f".map(t, t.metadata.annotations['{NETWORKS}'])",
        ),
        # A TrainJob's pods are its runtime's (the platform's); its runtime patches may add
        # pod-template annotations.
        (
            "patchAnnotations",
            "has(object.spec.runtimePatches) ? object.spec.runtimePatches.filter(p, "
            f"{RUNTIME_POD}).map(p, p.trainingRuntimeSpec.template.spec.replicatedJobs"
            ".filter(j, has(j.template) && has(j.template.spec) && has(j.template.spec.template)"
            " && has(j.template.spec.template.metadata)"
            " && has(j.template.spec.template.metadata.annotations))"
            ".map(j, j.template.spec.template.metadata.annotations)) : []",
        ),
        # What a TrainJob sets on the pods its runtime makes: the trainer's and the
        # initializers' variables, and its runtime patches' pod specs (lists per patch).
        (
            "trainJobEnvs",
            f"{KIND} != 'TrainJob' ? [] : ["
            f"{_has('object.spec.trainer.env')} ? object.spec.trainer.env : [], "
            f"{_has('object.spec.initializer.dataset.env')} ? "
            "object.spec.initializer.dataset.env : [], "
            f"{_has('object.spec.initializer.model.env')} ? "
            "object.spec.initializer.model.env : []]",
        ),
        (
            "patchPodSpecs",
            "has(object.spec.runtimePatches) ? object.spec.runtimePatches.filter(p, "
            f"{RUNTIME_POD}).map(p, p.trainingRuntimeSpec.template.spec.replicatedJobs"
            ".filter(j, has(j.template) && has(j.template.spec) && has(j.template.spec.template)"
            " && has(j.template.spec.template.spec))"
            ".map(j, j.template.spec.template.spec)) : []",
        ),
        (
            "patchContainers",
            "variables.patchPodSpecs.map(ps, ps.map(s, "
            "(has(s.containers) ? s.containers : []) + "
            "(has(s.initContainers) ? s.initContainers : [])))",
        ),
        # The labels a TrainJob's runtime patches put on the JobSet, its Jobs and their pod
        # templates (lists per patch): JobSet copies them onto the pods it makes.
        (
            "patchLabels",
            "has(object.spec.runtimePatches) ? object.spec.runtimePatches.filter(p, "
            "has(p.trainingRuntimeSpec) && has(p.trainingRuntimeSpec.template)).map(p, "
            "[has(p.trainingRuntimeSpec.template.metadata) && "
            "has(p.trainingRuntimeSpec.template.metadata.labels) ? "
            "p.trainingRuntimeSpec.template.metadata.labels : {}] + "
            f"({RUNTIME_POD} ? p.trainingRuntimeSpec.template.spec.replicatedJobs.filter(j, "
            "has(j.template) && has(j.template.metadata) && has(j.template.metadata.labels))"
            ".map(j, j.template.metadata.labels) + "
            "p.trainingRuntimeSpec.template.spec.replicatedJobs.filter(j, has(j.template) && "
            "has(j.template.spec) && has(j.template.spec.template) && "
            "has(j.template.spec.template.metadata) && "
            "has(j.template.spec.template.metadata.labels))"
            ".map(j, j.template.spec.template.metadata.labels) : [])) : []",
        ),
        (
            "runtimeQueues",
            "has(object.spec.runtimePatches) ? object.spec.runtimePatches.filter(p, "
            "has(p.trainingRuntimeSpec) && has(p.trainingRuntimeSpec.template) "
            "&& has(p.trainingRuntimeSpec.template.metadata) "
            "&& has(p.trainingRuntimeSpec.template.metadata.annotations) "
            f"&& '{VOLCANO_QUEUE}' in p.trainingRuntimeSpec.template.metadata.annotations)"
            f".map(p, p.trainingRuntimeSpec.template.metadata.annotations['{VOLCANO_QUEUE}'])"
            " : []",
        ),
        ("networks", "params.data.networks.split(',')"),
        ("registries", "params.data.registries.split(',')"),
        ("priorities", "params.data.priorities.split(',')"),
    ]


NAMESPACE = "object.metadata.namespace"
# A pod spec `s` without host namespaces or hostPath volumes; a container `c` without
# privilege or added capabilities.
HOST_FREE = (
    "!(has(s.hostNetwork) && s.hostNetwork) && !(has(s.hostPID) && s.hostPID) "
    "&& !(has(s.hostIPC) && s.hostIPC) && (!has(s.volumes) || s.volumes.all(v, !has(v.hostPath)))"
)
UNPRIVILEGED = (
    "!has(c.securityContext) || ((!has(c.securityContext.privileged) || "
    "!c.securityContext.privileged) && (!has(c.securityContext.capabilities) || "
    "!has(c.securityContext.capabilities.add) || size(c.securityContext.capabilities.add) == 0))"
)
# The shared checkpoint claim: each run sees its own directory of it, named by the job
# label its controller sets on the pods (the Training Operator, JobSet and the Job
# controller overwrite or validate these labels, so a pod cannot claim another job's).
CHECKPOINT_CLAIM = "checkpoints"
# The label each kind's controller sets to the job's name on the pods it makes (the MPI
# Operator's as the Training Operator's; the Job controller's on a CronJob's Jobs' pods).
# A label the pod's controller does not set reads as "" (a fieldRef to a missing label),
# and subPathExpr "" mounts the whole claim: every run's checkpoints.
JOB_NAME_LABEL_OF_KIND = {
    **{kind: label for kind, label in JOB_LABELS.items() if kind != "TrainJob"},
    "Job": "batch.kubernetes.io/job-name",
    "CronJob": "batch.kubernetes.io/job-name",
}
JOB_NAME_FIELD = (
    " : ".join(
        f"{KIND} in {_kinds(tuple(k for k, v in JOB_NAME_LABEL_OF_KIND.items() if v == label))} "
        f"? \"metadata.labels['{label}']\""
        for label in dict.fromkeys(JOB_NAME_LABEL_OF_KIND.values())
    )
    + " : ''"
)
JOB_NAME_VAR = "TRAINER_JOB_NAME"
OWN_DIRECTORY = f"$({JOB_NAME_VAR})"
_JOB_NAME_FROM_LABEL = (
    f"e.name != '{JOB_NAME_VAR}' || (has(e.valueFrom) && has(e.valueFrom.fieldRef) && "
    "variables.jobNameField != '' && e.valueFrom.fieldRef.fieldPath == variables.jobNameField)"
)
# A TrainJob's runtime patch container `c` (merged into the runtime's, which mounts the
# checkpoints): it neither renames the job's directory nor mounts the volume again.
PATCH_KEEPS_CHECKPOINTS = (
    f"(!has(c.env) || c.env.all(e, e.name != '{JOB_NAME_VAR}')) && "
    f"(!has(c.volumeMounts) || c.volumeMounts.all(m, m.name != '{CHECKPOINT_CLAIM}'))"
)
# A runtime patch's pod spec `s` adds no volume of the checkpoint claim: patches merge, so
# one patch's volume could be mounted by another's container.
PATCH_NO_CHECKPOINT_VOLUME = (
    "!has(s.volumes) || s.volumes.all(v, !has(v.persistentVolumeClaim) || "
    f"v.persistentVolumeClaim.claimName != '{CHECKPOINT_CLAIM}')"
)
# An ephemeral volume cloned from another claim (the checkpoints) reads every run's data.
_EPHEMERAL_FRESH = (
    "!has(v.ephemeral) || !has(v.ephemeral.volumeClaimTemplate) || "
    "!has(v.ephemeral.volumeClaimTemplate.spec) || "
    "(!has(v.ephemeral.volumeClaimTemplate.spec.dataSource) && "
    "!has(v.ephemeral.volumeClaimTemplate.spec.dataSourceRef) && "
    "!has(v.ephemeral.volumeClaimTemplate.spec.volumeName))"
)
# Volume kinds a pod spec `s` may use: Pod Security `restricted`'s list without inline
# CSI volumes (a driver the platform did not choose), plus image volumes (their
# reference is checked against the registries); a projected volume without a
# service-account token.
VOLUME_KINDS = (
    "configMap",
    "secret",
    "downwardAPI",
    "emptyDir",
    "persistentVolumeClaim",
    "ephemeral",
    "projected",
    "image",
)
# Projected sources that carry no credential (a pod certificate or service-account
# token would authenticate as the pod).
PROJECTED_SOURCES = ("configMap", "secret", "downwardAPI", "clusterTrustBundle")
VOLUMES_ALLOWED = (
    "!has(s.volumes) || s.volumes.all(v, ("
    + " || ".join(f"has(v.{k})" for k in VOLUME_KINDS if k != "projected")
    + " || (has(v.projected) && (!has(v.projected.sources) || v.projected.sources.all(x, "
    + " || ".join(f"has(x.{k})" for k in PROJECTED_SOURCES)
    + ")))) && ("
    + _EPHEMERAL_FRESH
    + "))"
)


# CEL: the registries entry `r` names one image (tenancy.pins_an_image).
PINS_AN_IMAGE = (
    "r.contains('@') || (r.contains('/') && r.substring(r.lastIndexOf('/') + 1).contains(':'))"
)


def _from_registries(image: str) -> str:
    """CEL: `image` comes from one of the registries (tenancy.from_registry)."""
    after = " || ".join(f"{image}.startsWith(r + '{b}')" for b in REGISTRY_BOUNDARIES)
    return (
        f"variables.registries.exists(r, r.endsWith('/') ? {image}.startsWith(r) : "
        f"({image} == r || (!({PINS_AN_IMAGE}) && ({after}))))"
    )


IMAGE_VOLUMES_APPROVED = (
    "!has(s.volumes) || s.volumes.all(v, !has(v.image) || (has(v.image.reference) && "
    + _from_registries("v.image.reference")
    + "))"
)
# A preempted or evicted pod keeps its GPUs for its grace period after the queue has
# given the quota to another job: long enough for an emergency checkpoint (the job
# templates use 300 s), no longer.
MAX_GRACE_SECONDS = 900
GRACE_BOUNDED = (
    "!has(s.terminationGracePeriodSeconds) || "
    f"s.terminationGracePeriodSeconds <= {MAX_GRACE_SECONDS}"
)
# Labels the job controllers set on the pods they make, and select them by (a job's
# headless service, its rendezvous name): a pod template carrying another job's would
# join its service.
CONTROLLER_LABEL_PREFIXES = (
    "training.kubeflow.org/",
    "trainer.kubeflow.org/",
    "jobset.sigs.k8s.io/",
    "batch.kubernetes.io/",
)
CONTROLLER_LABELS = ("job-name", "controller-uid")
# A label map with none of the controllers' labels (`{labels}`: the map's expression).
NO_CONTROLLER_LABELS = (
    "{labels}.all(k, !("
    + " || ".join(f"k.startsWith({x!r})" for x in CONTROLLER_LABEL_PREFIXES)
    + f") && !(k in {list(CONTROLLER_LABELS)}))"
)
# A pod spec `s` with no address of its own (another job's pod name under its service).
OWN_ADDRESS = "(!has(s.hostname) || s.hostname == '') && (!has(s.subdomain) || s.subdomain == '')"
# The Secrets the MPI controllers make for a job's SSH keys, `<job>-ssh` (MPI Operator
# v0.8.0 pkg/controller/mpi_job_controller.go, newSSHAuthSecret) and
# `<trainjob>-mpi-ssh-auth` (Trainer v2.3.0 pkg/constants, MPISSHAuthSecretSuffix): the
# controllers mount them into their own pods; a template naming one reads another job's key.
JOB_KEY_SUFFIXES = ("-ssh", "-mpi-ssh-auth")
# A TrainJob's initializers: Trainer gives each one's secretRef (its download credentials,
# trainer v2.3.0 TrainJob CRD) to the initializer container as envFrom.
INITIALIZERS = ("dataset", "model")


def _not_a_key(name: str) -> str:
    """CEL: the Secret name `name` is no job's SSH key."""
    return "!(" + " || ".join(f"{name}.endsWith('{x}')" for x in JOB_KEY_SUFFIXES) + ")"


# An env entry `e` that reads no job's key.
ENV_NAMES_NO_KEY = (
    "!has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || "
    f"!has(e.valueFrom.secretKeyRef.name) || {_not_a_key('e.valueFrom.secretKeyRef.name')}"
)
# A pod spec `s` that names no job's key: volumes, projections, env and envFrom.
NO_JOB_KEYS = (
    "(!has(s.volumes) || s.volumes.all(v, (!has(v.secret) || !has(v.secret.secretName) || "
    f"{_not_a_key('v.secret.secretName')}) && (!has(v.projected) || "
    "!has(v.projected.sources) || v.projected.sources.all(x, !has(x.secret) || "
    f"!has(x.secret.name) || {_not_a_key('x.secret.name')})))) && "
    "((has(s.containers) ? s.containers : []) + "
    "(has(s.initContainers) ? s.initContainers : [])).all(c, "
    f"(!has(c.env) || c.env.all(e, {ENV_NAMES_NO_KEY})) && (!has(c.envFrom) || "
    "c.envFrom.all(f, !has(f.secretRef) || !has(f.secretRef.name) || "
    f"{_not_a_key('f.secretRef.name')})))"
)
# A pod spec `s` whose device claims come from templates: a claim named directly holds
# devices allocated for someone else, and any pod naming it shares them.
OWN_CLAIMS = (
    "!has(s.resourceClaims) || s.resourceClaims.all(r, !has(r.resourceClaimName) || "
    "r.resourceClaimName == '')"
)
# A pod spec `s` with the namespace's default service account and no token automount.
OWN_IDENTITY = (
    "(!has(s.serviceAccountName) || s.serviceAccountName in ['', 'default']) && "
    "(!has(s.serviceAccount) || s.serviceAccount in ['', 'default']) && "
    "(!has(s.automountServiceAccountToken) || !s.automountServiceAccountToken)"
)
# A pod spec `s` that the scheduler places: no nodeName, no toleration of every taint.
SCHEDULED = (
    "(!has(s.nodeName) || s.nodeName == '') && (!has(s.tolerations) || "
    "s.tolerations.all(t, (has(t.key) && t.key != '') || "
    "!has(t.operator) || t.operator != 'Exists'))"
)
# A container `c` of pod spec `s` mounts the checkpoint claim only at its job's directory,
# with the job's name from its controller's label (every entry of that name: the last
# one wins).
OWN_CHECKPOINTS = (
    f"!has(s.volumes) || !s.volumes.exists(v, has(v.persistentVolumeClaim) && "
    f"v.persistentVolumeClaim.claimName == '{CHECKPOINT_CLAIM}') || "
    "((has(s.containers) ? s.containers : []) + (has(s.initContainers) ? s.initContainers : []))"
    ".all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, !s.volumes.exists(v, "
    "v.name == m.name && has(v.persistentVolumeClaim) && "
    f"v.persistentVolumeClaim.claimName == '{CHECKPOINT_CLAIM}') || "
    "((!has(m.subPath) || m.subPath == '') && has(m.subPathExpr) && "
    f"m.subPathExpr == '{OWN_DIRECTORY}' && has(c.env) && "
    f"c.env.exists(e, e.name == '{JOB_NAME_VAR}') && c.env.all(e, {_JOB_NAME_FROM_LABEL}))))"
)
# An env entry `e` that shows no GPUs; a container `c` whose entries all are.
VISIBLE_DEVICES_VOID = (
    f"e.name != '{VISIBLE_DEVICES}' || (!has(e.valueFrom) && "
    "(!has(e.value) || e.value in ['', 'void', 'none']))"
)
NO_VISIBLE_DEVICES = f"!has(c.env) || c.env.all(e, {VISIBLE_DEVICES_VOID})"


def _validations(p: ClusterProfile) -> list[dict[str, Any]]:
    queued = f"{KIND} in {_kinds(QUEUED)}"
    out = [
        {
            "expression": f"{queued} || !variables.accelerators",
            "messageExpression": f"{KIND} + ' ' + object.metadata.name + ' asks for GPUs or RDMA "
            "devices outside the queue, which no quota counts: run it as a Job or a training job "
            "queued in ' + params.data.queue",
            "reason": "Forbidden",
        },
        {
            "expression": f"!({queued}) || params.data.team == '' || ('{TEAM_LABEL}' in "
            f"variables.labels && variables.labels['{TEAM_LABEL}'] == params.data.team)",
            "messageExpression": f"'namespace ' + {NAMESPACE} + ' belongs to team ' + "
            f"params.data.team + ': its jobs carry the label {TEAM_LABEL}: ' + params.data.team",
            "reason": "Forbidden",
        },
    ]
    if p.scheduler == "kueue":
        out.append(
            {
                "expression": f"!({queued}) || ('{QUEUE_LABEL}' in variables.jobLabels && "
                f"variables.jobLabels['{QUEUE_LABEL}'] == params.data.queue)",
                "messageExpression": f"'jobs in namespace ' + {NAMESPACE} + ' queue in "
                f"LocalQueue ' + params.data.queue + ' (label {QUEUE_LABEL})'",
                "reason": "Forbidden",
            }
        )
        out.append(
            {
                "expression": f"!({queued}) || ('{PRIORITY_LABEL}' in variables.jobLabels && "
                f"variables.jobLabels['{PRIORITY_LABEL}'] in variables.priorities)",
                "messageExpression": f"'jobs in namespace ' + {NAMESPACE} + ' use one of the "
                f"priorities ' + params.data.priorities + ' (label {PRIORITY_LABEL})'",
                "reason": "Forbidden",
            }
        )
    elif p.scheduler == "volcano":
        policy = "object.spec.runPolicy.schedulingPolicy"
        kubeflow = f"{KIND} in ['PyTorchJob', 'MPIJob']"
        # Plain Jobs and JobSets queue by their pods: Volcano's scheduler and queue annotation.
        by_pods = (
            "variables.templates.size() > 0 && variables.templates.all(t, has(t.metadata) "
            f"&& has(t.metadata.annotations) && '{VOLCANO_QUEUE}' in t.metadata.annotations "
            f"&& t.metadata.annotations['{VOLCANO_QUEUE}'] == params.data.queue) && "
            "variables.podSpecs.all(s, has(s.schedulerName) && s.schedulerName == 'volcano')"
        )
        out.append(
            {
                "expression": f"!({queued}) || ({KIND} == 'TrainJob' ? "
                "((params.data.team == '' || variables.runtimeQueues.size() > 0) && "
                "variables.runtimeQueues.all(q, q == params.data.queue)) : "
                f"{kubeflow} ? ({_has(policy + '.queue')} && {policy}.queue == params.data.queue)"
                f" : ({by_pods}))",
                "messageExpression": f"'jobs in namespace ' + {NAMESPACE} + ' queue in Volcano "
                "queue ' + params.data.queue",
                "reason": "Forbidden",
            }
        )
        out.append(
            {
                "expression": f"!({queued}) || {KIND} == 'TrainJob' || ({kubeflow} ? "
                f"({_has(policy + '.priorityClass')} "
                f"&& {policy}.priorityClass in variables.priorities) : "
                "variables.podSpecs.all(s, has(s.priorityClassName) && "
                "s.priorityClassName in variables.priorities))",
                "messageExpression": f"'jobs in namespace ' + {NAMESPACE} + ' use one of the "
                "priorities ' + params.data.priorities",
                "reason": "Forbidden",
            }
        )
        out.append(
            {
                "expression": _without_annotations(GROUP_NAMES),
                "message": "training pods join their own job's PodGroup: no "
                f"{' or '.join(GROUP_NAMES)} annotation, which puts a pod in another "
                "job's gang",
                "reason": "Forbidden",
            }
        )
    # A pod's PriorityClass is what kube-scheduler preempts by (system-node-critical evicts
    # anything on the node: kubernetes v1.35 pkg/scheduler/framework/preemption), and no
    # admission plugin keeps the system classes in kube-system unless the cluster
    # configures it (plugin/pkg/admission/priority). Kueue orders workloads by the label;
    # without a queue no priority is the platform's; Volcano's are the profile's classes.
    if p.scheduler == "volcano":
        out.append(
            {
                "expression": "variables.podSpecs.all(s, !has(s.priorityClassName) || "
                "s.priorityClassName in variables.priorities)",
                "messageExpression": "'a pod priorityClassName is one of the priorities ' + "
                "params.data.priorities + ': another, such as system-node-critical, would "
                "preempt the pods of other jobs'",
                "reason": "Forbidden",
            }
        )
    else:
        whose = (
            f"pods take their priority from the queue (label {PRIORITY_LABEL})"
            if p.scheduler == "kueue"
            else "pods of all jobs share one priority"
        )
        out.append(
            {
                "expression": "variables.podSpecs.all(s, !has(s.priorityClassName) || "
                "s.priorityClassName == '')",
                "message": f"{whose}: no priorityClassName, which kube-scheduler would preempt "
                "other pods by",
                "reason": "Forbidden",
            }
        )
    # The scheduler the cluster's queue works with (Kueue: kube-scheduler, which places by
    # the flavors and topology Kueue assigns; Volcano: its own, for gangs). The Training
    # Operator fills schedulerName only where a template leaves it empty.
    scheduler = {"kueue": "default-scheduler", "volcano": "volcano"}.get(p.scheduler)
    if scheduler is not None:
        out.append(
            {
                "expression": "variables.podSpecs.all(s, !has(s.schedulerName) || "
                f"s.schedulerName in ['', '{scheduler}'])",
                "message": f"training pods are scheduled by {scheduler}, which the cluster's "
                "queue works with: another schedulerName skips its placement",
                "reason": "Forbidden",
            }
        )
    out += [
        {
            "expression": "variables.attachments.all(a, a.split(',').all(n, n.trim() in "
            "variables.networks)) && variables.patchAnnotations.all(js, js.all(m, "
            f"!('{NETWORKS}' in m) || m['{NETWORKS}'].split(',').all(n, n.trim() in "
            "variables.networks)))",
            "messageExpression": "'pods attach only the approved networks ' + params.data.networks",
            "reason": "Forbidden",
        },
        {
            "expression": _without_annotations((DEFAULT_NETWORK,)),
            "message": f"pods keep the cluster's default network: no {DEFAULT_NETWORK}",
            "reason": "Forbidden",
        },
        {
            "expression": f"!({KIND} in {list(SERVICE_NAMED_KINDS)}) || "
            f"(!object.metadata.name.matches('{REPLICA_SERVICE_NAME}') && ({KIND} != 'JobSet' "
            f"|| !({_has('object.spec.network.subdomain')}) || "
            f"!object.spec.network.subdomain.matches('{REPLICA_SERVICE_NAME}')))",
            "message": f"an {', '.join(SERVICE_NAMED_KINDS)} (and a JobSet's subdomain) is not "
            "named <job>-master-<n> or <job>-worker-<n>: its Service would take the name of a "
            "PyTorchJob's master or workers, whose MASTER_ADDR would reach this job",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.containers.all(cs, cs.all(c, {METRICS_NUMBERED})) && "
            f"variables.patchContainers.all(pcs, pcs.all(cs, cs.all(c, {METRICS_NUMBERED})))",
            "message": f"a container port named {METRICS_PORT} is {METRICS_PORT_NUMBER}: the "
            "namespace opens that name to every pod, so another number would open a "
            "rendezvous or TCPStore to other jobs",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.containers.all(cs, cs.all(c, has(c.image) && "
            f"{_from_registries('c.image')})) && "
            "(!has(object.spec.trainer) || !has(object.spec.trainer.image) || "
            f"{_from_registries('object.spec.trainer.image')}) && "
            f"variables.podSpecs.all(s, {IMAGE_VOLUMES_APPROVED}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {IMAGE_VOLUMES_APPROVED}))",
            "messageExpression": "'images come from ' + params.data.registries",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {HOST_FREE}) && "
            f"variables.containers.all(cs, cs.all(c, {UNPRIVILEGED})) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {HOST_FREE})) && "
            f"variables.patchContainers.all(pcs, pcs.all(cs, cs.all(c, {UNPRIVILEGED})))",
            "message": "training pods take no privilege: no host namespaces, hostPath "
            "volumes, privileged containers or added capabilities (RDMA needs none)",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {SCHEDULED}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {SCHEDULED}))",
            "message": "training pods are placed by the scheduler: no nodeName (it skips "
            "scheduling, gang and topology placement) and no toleration of every taint "
            "(an empty key with operator Exists reaches nodes kept for others)",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.templates.all(t, !has(t.metadata) || "
            f"!has(t.metadata.labels) || {NO_CONTROLLER_LABELS.format(labels='t.metadata.labels')}"
            ") && variables.patchLabels.all(ls, ls.all(l, "
            f"{NO_CONTROLLER_LABELS.format(labels='l')})) && "
            f"variables.podSpecs.all(s, {OWN_ADDRESS}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {OWN_ADDRESS}))",
            "message": "training pods take their identity from their controller: no labels of "
            f"its ({', '.join(CONTROLLER_LABEL_PREFIXES)}...), which the services of another "
            "job select, and no hostname or subdomain (another job's rendezvous address)",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {GRACE_BOUNDED}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {GRACE_BOUNDED}))",
            "message": "training pods give back their GPUs when preempted: "
            f"terminationGracePeriodSeconds is at most {MAX_GRACE_SECONDS} (the quota is "
            "released before the pods are gone)",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {OWN_IDENTITY}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {OWN_IDENTITY}))",
            "message": "training pods run as the namespace's default service account, without "
            "its token: no serviceAccountName (another account's permissions, such as an MPI "
            "launcher's exec into its workers) and no automountServiceAccountToken: true",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {NO_JOB_KEYS}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {NO_JOB_KEYS})) && "
            f"variables.trainJobEnvs.all(es, es.all(e, {ENV_NAMES_NO_KEY})) && "
            + " && ".join(
                f"(({_has(ref)}) ? {_not_a_key(ref)} : true)"
                for ref in (f"object.spec.initializer.{i}.secretRef.name" for i in INITIALIZERS)
            ),
            "message": "training pods read no job's SSH key: no Secret named "
            f"<job>{JOB_KEY_SUFFIXES[0]} or <trainjob>{JOB_KEY_SUFFIXES[1]} (the MPI "
            "controllers mount a job's own key into its pods; another job's opens its workers)",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {OWN_CLAIMS}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {OWN_CLAIMS}))",
            "message": "training pods claim devices through a ResourceClaimTemplate "
            "(resourceClaimTemplateName): a ResourceClaim named directly shares the devices "
            "allocated to another",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {OWN_CHECKPOINTS}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {PATCH_NO_CHECKPOINT_VOLUME})) && "
            f"variables.trainJobEnvs.all(es, es.all(e, e.name != '{JOB_NAME_VAR}')) && "
            "variables.patchContainers.all(pcs, pcs.all(cs, cs.all(c, "
            f"{PATCH_KEEPS_CHECKPOINTS})))",
            "message": f"a run sees its own checkpoints: the {CHECKPOINT_CLAIM} claim is mounted "
            f"with subPathExpr {OWN_DIRECTORY} alone, {JOB_NAME_VAR} coming from the job label "
            "its controller sets (a TrainJob and its runtime patches leave both to the runtime)",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.podSpecs.all(s, {VOLUMES_ALLOWED}) && "
            f"variables.patchPodSpecs.all(ps, ps.all(s, {VOLUMES_ALLOWED}))",
            "message": "training pods mount storage through claims: volumes are "
            f"{', '.join(VOLUME_KINDS)} (a volume that names a server or driver inline "
            "reaches storage no claim or quota governs; a projected volume carries no "
            "service-account token)",
            "reason": "Forbidden",
        },
        # The NVIDIA container runtime exposes the GPUs this variable lists to any
        # container that sets it (accept-nvidia-visible-devices-envvar-when-unprivileged,
        # true by default), whether or not the device plugin gave it any. The generated
        # GPU Operator values turn that off; this holds where the runtime is not ours.
        {
            "expression": f"variables.containers.all(cs, cs.all(c, {NO_VISIBLE_DEVICES})) && "
            f"variables.trainJobEnvs.all(es, es.all(e, {VISIBLE_DEVICES_VOID})) && "
            f"variables.patchContainers.all(pcs, pcs.all(cs, cs.all(c, {NO_VISIBLE_DEVICES})))",
            "message": f"containers get GPUs by requesting nvidia.com/gpu: {VISIBLE_DEVICES} may "
            "only be void or none (the container runtime would expose GPUs given to other pods)",
            "reason": "Forbidden",
        },
    ]
    return out


NETWORK_POLICY = "trainops-runs-network"
# The job labels a policy's podSelector may name its job by (tenancy.JOB_LABELS).
_JOB_KEYS = _kinds(tuple(dict.fromkeys(JOB_LABELS.values())))
_SELECTED = "object.spec.podSelector.matchLabels"
_METRICS_ONLY = (
    "has(r.ports) && size(r.ports) > 0 && r.ports.all(pt, has(pt.port) && "
    f"type(pt.port) == string && pt.port == '{METRICS_PORT}' && !has(pt.endPort))"
)
_OWN_PEER = (
    "!has(f.namespaceSelector) && !has(f.ipBlock) && has(f.podSelector) && "
    "has(f.podSelector.matchLabels) && variables.jobKeys.exists(k, "
    f"k in f.podSelector.matchLabels && f.podSelector.matchLabels[k] == {_SELECTED}[k])"
)


def _network_policy(annotations: dict[str, str]) -> list[dict[str, Any]]:
    """The gate on NetworkPolicies in tenant namespaces (policies/tenancy.py
    network-policy-own-job): each opens a job's pods to that job's pods, or the metrics
    port to all, and none isolates egress. The platform's trainops-jobs-apart passes."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NETWORK_POLICY, "annotations": annotations},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["networking.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["networkpolicies"],
                    }
                ]
            },
            "variables": [
                {
                    "name": "jobKeys",
                    "expression": f"has({_SELECTED}) ? "
                    f"{_JOB_KEYS}.filter(k, k in {_SELECTED}) : []",
                }
            ],
            "validations": [
                {
                    "expression": "!has(object.spec.egress) && (!has(object.spec.policyTypes) "
                    "|| !('Egress' in object.spec.policyTypes))",
                    "message": "NetworkPolicies in a team namespace isolate ingress only (one "
                    "isolating egress can cut other jobs' pods off the network)",
                    "reason": "Forbidden",
                },
                {
                    "expression": "!has(object.spec.ingress) || object.spec.ingress.all(r, "
                    f"(!has(r.from) || size(r.from) == 0) ? ({_METRICS_ONLY}) : "
                    f"r.from.all(f, {_OWN_PEER}))",
                    "message": "a NetworkPolicy in a team namespace admits into a job's pods "
                    "(selected by their controller's job label) the pods of the same job "
                    f"only, or opens the {METRICS_PORT} port alone: it may not reopen other "
                    "jobs' rendezvous and NCCL ports",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NETWORK_POLICY, "annotations": annotations},
        "spec": {
            "policyName": NETWORK_POLICY,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
                }
            },
        },
    }
    return [policy, binding]


POD_UPDATES = "trainops-runs-pod-updates"
# What a pod's update can still change (kubernetes v1.35 pkg/apis/core/validation,
# ValidatePodUpdate: container images, added tolerations, labels;
# ValidatePodEphemeralContainersUpdate: ephemeral containers, added through the
# pods/ephemeralcontainers subresource and never removed). `o` is the old pod's
# container of the same name.
_IMAGE_KEPT = "oldObject.spec.{list}.exists(o, o.name == c.name && o.image == c.image)"
_CHANGED_IMAGES_APPROVED = " && ".join(
    f"(!has(object.spec.{name}) || object.spec.{name}.all(c, "
    f"(has(oldObject.spec.{name}) && {_IMAGE_KEPT.format(list=name)}) || "
    f"(has(c.image) && {_from_registries('c.image')})))"
    for name in ("containers", "initContainers")
)
# Ephemeral containers may not set subPath or subPathExpr (validateEphemeralContainers), so
# one mounting the checkpoint claim's volume sees every run's directory.
_NEW_EPHEMERAL = (
    "(has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])"
    ".filter(c, !has(oldObject.spec.ephemeralContainers) || "
    "!oldObject.spec.ephemeralContainers.exists(o, o.name == c.name))"
)
_NO_CHECKPOINT_MOUNT = (
    "!has(c.volumeMounts) || !has(object.spec.volumes) || c.volumeMounts.all(m, "
    "!object.spec.volumes.exists(v, v.name == m.name && has(v.persistentVolumeClaim) && "
    f"v.persistentVolumeClaim.claimName == '{CHECKPOINT_CLAIM}'))"
)
_CHANGED_LABELS = (
    "(has(object.metadata.labels) ? object.metadata.labels : {}).filter(k, "
    "!has(oldObject.metadata.labels) || !(k in oldObject.metadata.labels) || "
    "oldObject.metadata.labels[k] != object.metadata.labels[k])"
)
_ADDED_TOLERATIONS = (
    "(has(object.spec.tolerations) ? object.spec.tolerations : []).filter(t, "
    "!has(oldObject.spec.tolerations) || !oldObject.spec.tolerations.exists(o, o == t))"
)


def _pod_updates(annotations: dict[str, str], controllers: list[str]) -> list[dict[str, Any]]:
    """The gate on updates of pods in tenant namespaces: `trainops-runs` checks a pod when
    it is made (by its owner's template when a controller makes it) and matches no pod
    update, since a refused finalizer or label update by a controller would leave a pod
    stuck. What an update can still change is checked here, and only what it changes: a
    container's image (`kubectl set image` on a job's pod), an ephemeral container
    (`kubectl debug`: any image, privilege, the whole checkpoint claim), a controller's
    label (another job's Service selects by them) and an added toleration of every taint."""
    users = "[" + ", ".join(f"'{u}'" for u in [*KUBE_JOB_CONTROLLERS, *controllers]) + "]"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POD_UPDATES, "annotations": annotations},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["pods", "pods/ephemeralcontainers"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "not-from-a-job-controller",
                    "expression": f"!(request.userInfo.username in {users})",
                }
            ],
            "variables": [
                {"name": "registries", "expression": "params.data.registries.split(',')"},
                {"name": "ephemeral", "expression": _NEW_EPHEMERAL},
            ],
            "validations": [
                {
                    "expression": _CHANGED_IMAGES_APPROVED
                    + " && variables.ephemeral.all(c, has(c.image) && "
                    + _from_registries("c.image")
                    + ")",
                    "messageExpression": "'an updated or ephemeral container image comes from ' "
                    "+ params.data.registries",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.ephemeral.all(c, ({UNPRIVILEGED}) && "
                    f"({NO_VISIBLE_DEVICES}) && ({_NO_CHECKPOINT_MOUNT}) && "
                    f"(!has(c.env) || c.env.all(e, {ENV_NAMES_NO_KEY})) && "
                    "(!has(c.envFrom) || c.envFrom.all(f, !has(f.secretRef) || "
                    f"!has(f.secretRef.name) || {_not_a_key('f.secretRef.name')})))",
                    "message": "an ephemeral container takes no privilege, no GPUs by "
                    f"{VISIBLE_DEVICES}, no job's SSH key and no mount of the "
                    f"{CHECKPOINT_CLAIM} claim (it cannot take a subPath, so it would see every "
                    "run's checkpoints)",
                    "reason": "Forbidden",
                },
                {
                    "expression": NO_CONTROLLER_LABELS.format(labels=_CHANGED_LABELS),
                    "message": "a pod's update sets none of its controller's labels "
                    f"({', '.join(CONTROLLER_LABEL_PREFIXES)}...): the services of another job "
                    "select its pods by them",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"{_ADDED_TOLERATIONS}.all(t, (has(t.key) && t.key != '') || "
                    "!has(t.operator) || t.operator != 'Exists')",
                    "message": "a pod's update adds no toleration of every taint (an empty key "
                    "with operator Exists keeps it on nodes kept for others)",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POD_UPDATES, "annotations": annotations},
        "spec": {
            "policyName": POD_UPDATES,
            "validationActions": ["Deny"],
            "paramRef": {"name": PARAMS, "parameterNotFoundAction": "Deny"},
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
                }
            },
        },
    }
    return [policy, binding]


def documents(p: ClusterProfile, controllers: list[str]) -> list[dict[str, Any]]:
    annotations = {"argocd.argoproj.io/sync-wave": "-1"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY, "annotations": annotations},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": _resources(p)},
            "matchConditions": [
                {"name": n, "expression": e} for n, e in _match_conditions(controllers)
            ],
            "variables": [{"name": n, "expression": e} for n, e in _variables(p)],
            "validations": _validations(p),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "annotations": annotations},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            # The parameters in the namespace of the job: each tenant's own.
            "paramRef": {"name": PARAMS, "parameterNotFoundAction": "Deny"},
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
                }
            },
        },
    }
    return [
        policy,
        binding,
        *_pod_updates(annotations, controllers),
        *_network_policy(annotations),
    ]
