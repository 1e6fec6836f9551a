"""Generates a run: a kustomization on the cluster's job template that sets only
what a run changes (name, replicas, image, the program and its arguments, and what
follows from them: elastic bounds and rendezvous id, Volcano's minAvailable; for an
MPI Operator v2 run on another MPI implementation, that and its mpirun; for a
TrainJob, numNodes, trainer.image and trainer.args), plus the run's data: a dataset
claim mounted read-only where the ranks run, and a data-preparation Job that runs
once per run while the ranks wait for it. The template's NetworkPolicy is renamed with
its job, so it opens the run's own pods to each other and no one else's.

The cluster's template owns the launcher (the container's `command`: trainer-launch,
or mpirun with the fabric's -x list) and everything around it; the run owns the
program (`args`). For torchrun templates the args are trainer-launch's: `--module
trainer ARGS` for the reference trainer, `-- COMMAND ARGS` for the run's own command.
For MPI templates they are the program mpirun starts on every slot.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from trainops.errors import InputError
from trainops.profile import tenancy
from trainops.profile.model import ClusterProfile
from trainops.profile.overlay import templates
from trainops.profile.run_scope import RunScope, plain_job_scope, run_path, scope_ops
from trainops.yamlio import dump

TEMPLATES = {
    "pytorchjob": "PyTorchJob",
    "elastic": "PyTorchJob",
    "mpijob": "MPIJob",
    "trainjob": "TrainJob",
    "trainjob-mpi": "TrainJob",
    "torchtitan": "PyTorchJob",
}
TEMPLATE_NAMES = {
    "pytorchjob": "train",
    "elastic": "train-elastic",
    "mpijob": "train-mpi",
    "trainjob": "train",
    "trainjob-mpi": "train-mpi",
    "torchtitan": "train-torchtitan",
}
MPI_TEMPLATES = ("mpijob", "trainjob-mpi")
MASTER_WORKER = ("pytorchjob", "torchtitan")  # one Master plus Workers
# Templates whose container command starts a given program (the platform's part of its
# command line): a run's arguments are that program's, and it takes no --command.
FIXED_PROGRAM = {"torchtitan": "torchtitan (python -m torchtitan.train)"}
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
# Hydra's mpirun (Intel MPI, MPICH) passes the launcher's whole environment to the
# ranks and knows none of Open MPI's -x or --bind-to: the template's launcher is
# replaced, not patched.
HYDRA_COMMAND = ["mpirun"]
REFERENCE_TRAINER = {"torch": ["--module", "trainer"], "mpi": ["python", "-m", "trainer"]}
DEFAULT_DATA_PATH = "/data"
PREPARED_DIR = ".trainops-prepared"  # markers under the dataset's mount, one per run
PATCH_MANAGER = "trainops.dev/new-run"
WAIT_FOR_ENV = "TRAINER_WAIT_FOR_FILE"  # trainer-launch starts no worker before it exists
_PLAIN = re.compile(r"[A-Za-z_/-][A-Za-z_./-]*\Z")
_YAML_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}
_RUN_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # \Z: no trailing newline
_CLAIM_NAME = re.compile(r"[a-z0-9]([-.a-z0-9]*[a-z0-9])?\Z")
_DATA_PATH = re.compile(r"(/[A-Za-z0-9._-]+)+\Z")
_RESERVED_PATHS = ("/checkpoints", "/dev", "/proc", "/sys", "/etc", "/usr", "/home")
MAX_RUN_NAME = 45  # pods are named <job>-worker-<n> and must stay within 63 characters
FAILURE_CAUSES = (
    "peer-lost",
    "terminated",
    "rendezvous",
    "hang",
    "transient",
    "nccl-fault",
    "bug",
    "device-fault",
    "out-of-memory",
)


def check_run_name(name: str) -> None:
    if not _RUN_NAME.match(name) or len(name) > MAX_RUN_NAME:
        raise InputError(
            f"run name {name!r} must be a DNS-1035 label (lowercase letters, digits, '-', "
            f"starting with a letter) of at most {MAX_RUN_NAME} characters"
        )
    if re.search(tenancy.REPLICA_SERVICE_NAME, name):
        raise InputError(
            f"run name {name!r} ends like a PyTorchJob's Service (-master-<n>, -worker-<n>): "
            "a job's own Service by that name would hold another run's MASTER_ADDR"
        )


@dataclass
class RunOptions:
    """What `trainops new-run` was asked for, beyond the run's name."""

    template: str = "pytorchjob"
    nodes: int = 2
    image: str | None = None
    args: list[str] | None = None  # the program's arguments; None: the template's
    command: str | None = None  # the program, as a shell would split it; None: the trainer
    mpi_implementation: str | None = None
    dataset_claim: str | None = None  # NAME[:PATH]
    prepare: str | None = None  # the data-preparation command, as a shell would split it
    failure_patterns: list[str] = field(default_factory=list)  # CAUSE=TEXT
    scope: RunScope = field(default_factory=RunScope)  # team, priority, topology


@dataclass
class Dataset:
    claim: str
    path: str

    @classmethod
    def parse(cls, value: str) -> Dataset:
        claim, _, path = value.partition(":")
        path = path or DEFAULT_DATA_PATH
        if not _CLAIM_NAME.match(claim) or len(claim) > 253:
            raise InputError(f"--dataset-claim {value!r}: {claim!r} is not a claim name")
        if not _DATA_PATH.match(path) or any(
            path == reserved or path.startswith(reserved + "/") for reserved in _RESERVED_PATHS
        ):
            raise InputError(
                f"--dataset-claim {value!r}: mount at an absolute path of letters, digits, "
                f"'.', '_', '-' outside {', '.join(_RESERVED_PATHS)}"
            )
        if any(part in (".", "..") for part in path.split("/")):
            raise InputError(f"--dataset-claim {value!r}: no '.' or '..' in the path")
        return cls(claim, path)

    def marker(self, run: str) -> str:
        return f"{self.path}/{PREPARED_DIR}/{run}"


def _words(option: str, value: str) -> list[str]:
    try:
        words = shlex.split(value)
    except ValueError as error:
        raise InputError(f"{option} {value!r}: {error}") from None
    if not words:
        raise InputError(f"{option} is empty")
    return words


def _check_patterns(patterns: list[str]) -> None:
    for pattern in patterns:
        cause, sep, text = pattern.partition("=")
        if not sep or not text or cause not in FAILURE_CAUSES or "\n" in pattern:
            raise InputError(
                f"--failure-pattern {pattern!r}: give CAUSE=TEXT on one line, CAUSE one of "
                f"{', '.join(FAILURE_CAUSES)}"
            )


@dataclass
class _Shape:
    """Where a template keeps what a run changes (JSON pointers)."""

    args: list[str]  # containers whose args are the program's
    compute: list[str]  # pod specs where the ranks run (container 0 computes)
    launcher_env: list[str] = field(default_factory=list)  # trainer-launch containers' env
    # MPI pods that must not start before the data is prepared: the Workers and the
    # launcher, whose mpirun would fail on Workers still waiting.
    waiting: list[str] = field(default_factory=list)


def _shape(template: str) -> _Shape:
    if template in MASTER_WORKER or template == "elastic":
        roles = ("Master", "Worker") if template in MASTER_WORKER else ("Worker",)
        pods = [f"/spec/pytorchReplicaSpecs/{role}/template/spec" for role in roles]
        args = [f"{pod}/containers/0/args" for pod in pods]
        return _Shape(args, pods, [f"{pod}/containers/0/env" for pod in pods])
    if template == "mpijob":
        launcher = "/spec/mpiReplicaSpecs/Launcher/template/spec"
        worker = "/spec/mpiReplicaSpecs/Worker/template/spec"
        return _Shape([f"{launcher}/containers/0/args"], [worker], [], [launcher, worker])
    # TrainJobs: the runtime holds the pods; the run writes trainer.* and runtimePatches.
    return _Shape(["/spec/trainer/args"], [])


def generate_run(profile: ClusterProfile, name: str, options: RunOptions) -> dict[str, str]:
    """The run directory's files by name: kustomization.yaml, and prepare.yaml if asked."""
    check_run_name(name)
    template, nodes, image = options.template, options.nodes, options.image
    if template not in TEMPLATES:
        raise InputError(f"unknown template {template!r}: use {', '.join(TEMPLATES)}")
    offered = templates(profile)
    if template not in offered or template == "preflight":
        usable = ", ".join(t for t in offered if t in TEMPLATES)
        raise InputError(
            f"cluster {profile.name} has no {template} template (trainer: {profile.trainer}, "
            f"mpiOperator: {profile.mpiOperator}): use {usable}"
        )
    _check_mpi_implementation(profile, template, image, options.mpi_implementation)
    if nodes < 1 or nodes > profile.nodes:
        raise InputError(f"--nodes must be between 1 and the cluster's {profile.nodes} nodes")
    if profile.scheduler != "default" and nodes > profile.usable_nodes:
        raise InputError(
            f"--nodes {nodes}: the queues hand out {profile.usable_nodes} of the cluster's "
            f"{profile.nodes} nodes (spareNodes: {profile.spareNodes} stay free to replace "
            "failed ones), so a larger job is never admitted"
        )
    _check_team_fits(profile, options.scope.team, nodes)
    if template in FIXED_PROGRAM and options.command is not None:
        raise InputError(
            f"--command on a {template} run: the template starts {FIXED_PROGRAM[template]}; "
            "give its arguments after --"
        )
    if template == "torchtitan" and options.args is not None:
        _check_torchtitan_args(options.args)
    command = _words("--command", options.command) if options.command is not None else None
    dataset = Dataset.parse(options.dataset_claim) if options.dataset_claim else None
    prepare = _words("--prepare", options.prepare) if options.prepare is not None else None
    if prepare is not None and dataset is None:
        raise InputError("--prepare writes into the run's dataset: give --dataset-claim too")
    _check_patterns(options.failure_patterns)
    if options.failure_patterns and template in MPI_TEMPLATES:
        raise InputError(
            "--failure-pattern: MPI templates start their ranks with mpirun, not trainer-launch, "
            "which reads the patterns"
        )
    if prepare is not None and template == "trainjob-mpi":
        raise InputError(
            "--prepare on a trainjob-mpi run: its ranks' pods come from the MPI runtime, and "
            "a TrainJob can give them no init container to wait in; use --template mpijob or "
            "trainjob, or prepare the data in a run of its own"
        )
    kind = TEMPLATES[template]
    shape = _shape(template)
    ops: list[dict[str, Any]] = [_replace("/metadata/name", name)]
    pods = nodes
    if template in MASTER_WORKER:
        if nodes > 1:  # one node: the Master alone, its Workers removed below
            ops.append(_replace("/spec/pytorchReplicaSpecs/Worker/replicas", nodes - 1))
    elif template == "elastic":
        minimum = (nodes + 1) // 2
        ops += [
            _replace("/spec/pytorchReplicaSpecs/Worker/replicas", nodes),
            _replace("/spec/elasticPolicy/minReplicas", minimum),
            _replace("/spec/elasticPolicy/maxReplicas", nodes),
            # Each run needs its own rendezvous id; torchrun's default is "none".
            _replace("/spec/elasticPolicy/rdzvId", name),
        ]
    elif kind == "TrainJob":
        # The runtime's PodGroup (Volcano) and Kueue's workload count the pods themselves.
        ops.append(_replace("/spec/trainer/numNodes", nodes))
        if image:
            ops.append(_add("/spec/trainer/image", _trainer_image(template, image)))
    else:
        ops.append(_replace("/spec/mpiReplicaSpecs/Worker/replicas", nodes))
        pods = nodes + 1
        if options.mpi_implementation not in (None, "OpenMPI"):
            ops.append(_replace("/spec/mpiImplementation", options.mpi_implementation))
            ops.append(
                _replace(
                    "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/command",
                    HYDRA_COMMAND,
                )
            )
    if profile.scheduler == "volcano" and kind != "TrainJob":
        # Gang scheduling: the PodGroup admits the job only when every pod fits.
        ops.append(_replace("/spec/runPolicy/schedulingPolicy/minAvailable", pods))
    run_image = image or profile.image
    # What trainer-launch reads (torchrun templates): the run's failure patterns, and
    # the file the preparation step writes last, which it waits for before starting.
    launcher_env = []
    if options.failure_patterns:
        patterns = "\n".join(options.failure_patterns)
        launcher_env.append({"name": "TRAINER_FAILURE_PATTERNS", "value": patterns})
    if dataset is not None:
        ops += _data_ops(template, shape, dataset)
        if prepare is not None and template in MPI_TEMPLATES:
            ops += _wait_ops(shape, dataset, name, run_image)
        elif prepare is not None:
            launcher_env.append({"name": WAIT_FOR_ENV, "value": dataset.marker(name)})
    if launcher_env and kind == "TrainJob":
        ops.append(_add("/spec/trainer/env", launcher_env))
    elif launcher_env:
        ops += [_add(f"{path}/-", item) for path in shape.launcher_env for item in launcher_env]
    ops += scope_ops(profile, template, kind, options.scope, nodes)
    patch = dump(ops)
    program = _program(template, command, options.args)
    if program is not None:
        patch += _args_ops(shape.args, program)
    if template in MASTER_WORKER and nodes == 1:
        # One node is the Master alone; removed last, after the ops that edit the
        # Workers' pod template as they edit the Master's.
        patch += dump([{"op": "remove", "path": "/spec/pytorchReplicaSpecs/Worker"}])
    up = "../" * run_path(options.scope.team, name).count("/") + "../"
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{up}training/{template}"],
    }
    files = {}
    if prepare is not None and dataset is not None:
        doc["resources"].append("prepare.yaml")
        queueing = plain_job_scope(profile, options.scope)
        waits = (
            "the ranks' init containers wait for"
            if template in MPI_TEMPLATES
            else f"trainer-launch waits for ({WAIT_FOR_ENV}) before it starts the ranks"
        )
        files["prepare.yaml"] = _prepare_job(name, dataset, prepare, run_image, queueing, waits)
    if options.scope.team:
        doc["namespace"] = options.scope.team
    if image and kind != "TrainJob":
        doc["images"] = [_image_override(profile, image)]
    doc["patches"] = [
        {
            "target": {"kind": kind, "name": TEMPLATE_NAMES[template]},
            "patch": patch.rstrip("\n"),
        },
        # The job's NetworkPolicy follows its name: it opens this run's pods alone.
        {
            "target": {"kind": "NetworkPolicy", "name": TEMPLATE_NAMES[template]},
            "patch": dump(tenancy.job_network_policy_renames(kind, name)).rstrip("\n"),
        },
    ]
    header = (
        f"# Run {name} on cluster {profile.name}: the cluster's {template} template plus\n"
        "# what this run changes. Runs are immutable once synced: start a new run\n"
        "# (a new directory) instead of editing this one.\n"
    )
    files["kustomization.yaml"] = header + dump(doc)
    return files


def _program(template: str, command: list[str] | None, args: list[str] | None) -> list[str] | None:
    """The args of the program's containers, or None to keep the template's."""
    launcher = "mpi" if template in MPI_TEMPLATES else "torch"
    if template in FIXED_PROGRAM:
        return args
    if command is not None:
        program = command if launcher == "mpi" else ["--", *command]
    elif args is not None:
        program = REFERENCE_TRAINER[launcher]
    else:
        return None
    return [*program, *(args or [])]


def _check_torchtitan_args(args: list[str]) -> None:
    """A torchtitan run's args replace the template's `--module llama3 --config ...`:
    torchtitan refuses to start without both."""
    given = {arg.split("=", 1)[0] for arg in args}
    missing = [flag for flag in ("--module", "--config") if flag not in given]
    if missing:
        raise InputError(
            f"a torchtitan run's arguments replace the template's: give "
            f"{' and '.join(missing)} (for example --module llama3 --config llama3_8b)"
        )


def _data_ops(template: str, shape: _Shape, dataset: Dataset) -> list[dict[str, Any]]:
    """Mount the claim read-only where the ranks run."""
    volume = {
        "name": "dataset",
        "persistentVolumeClaim": {"claimName": dataset.claim, "readOnly": True},
    }
    mount = {"name": "dataset", "mountPath": dataset.path, "readOnly": True}
    if TEMPLATES[template] == "TrainJob":
        # Both runtimes run the ranks in replicated job `node`, container `node`.
        pod = {"containers": [{"name": "node", "volumeMounts": [mount]}], "volumes": [volume]}
        job = {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
        patch = {
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
        }
        return [_add("/spec/runtimePatches", [patch])]
    ops = []
    for pod_path in shape.compute:
        ops.append(_add(f"{pod_path}/volumes/-", volume))
        ops.append(_add(f"{pod_path}/containers/0/volumeMounts/-", mount))
    return ops


def _wait_ops(shape: _Shape, dataset: Dataset, run: str, image: str) -> list[dict[str, Any]]:
    """mpirun cannot wait for the data: its pods wait in an init container instead."""
    volume = {
        "name": "dataset",
        "persistentVolumeClaim": {"claimName": dataset.claim, "readOnly": True},
    }
    marker = dataset.marker(run)
    wait = {
        "name": "wait-for-data",
        "image": image,
        "command": [
            "/bin/sh",
            "-c",
            'until [ -e "$0" ]; do echo "waiting for $0 (the run\'s prepare Job)"; sleep 10; done',
            marker,
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "volumeMounts": [{"name": "dataset", "mountPath": dataset.path, "readOnly": True}],
    }
    ops = []
    for pod_path in shape.waiting:
        if pod_path not in shape.compute:  # the others got the volume with the mount
            ops.append(_add(f"{pod_path}/volumes", [volume]))
        ops.append(_add(f"{pod_path}/initContainers", [wait]))
    return ops


def _check_team_fits(profile: ClusterProfile, name: str | None, nodes: int) -> None:
    """A team's run larger than its queue can ever hold would wait unadmitted forever."""
    team = profile.team(name) if name else None
    if team is None or profile.scheduler == "default":
        return  # an unknown team is scope_ops's error
    ceiling = tenancy.team_ceiling_nodes(profile, team)
    if nodes > ceiling:
        borrow = (
            f"borrowingLimit {team.borrowingLimit}"
            if team.borrowingLimit is not None
            else "what the other queues lend"
        )
        raise InputError(
            f"--nodes {nodes}: team {team.name}'s queue holds at most {ceiling} nodes at once "
            f"(its {team.gpus} GPUs plus {borrow}), so a larger job is never admitted"
        )


def _prepare_job(
    run: str,
    dataset: Dataset,
    command: list[str],
    image: str,
    queueing: dict[str, dict],
    waits: str,
) -> str:
    """One Job per run writes the dataset; Argo CD applies the run's job after it succeeds
    (sync wave -1), and the ranks wait for its marker file (`waits` says how). It queues as
    the run does (`queueing`, from `plain_job_scope`)."""
    marker = dataset.marker(run)
    script = f'"$@" && mkdir -p {dataset.path}/{PREPARED_DIR} && touch {marker}'
    labels = {"app.kubernetes.io/part-of": "trainops", "trainops.dev/shape": "prepare"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{run}-prepare",
            "namespace": "training",
            "labels": {**labels, **queueing["labels"]},
            "annotations": {"argocd.argoproj.io/sync-wave": "-1"},
        },
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {
                    "labels": labels,
                    **({"annotations": queueing["annotations"]} if queueing["annotations"] else {}),
                },
                "spec": {
                    **queueing["pod"],
                    "restartPolicy": "Never",
                    "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
                    "containers": [
                        {
                            "name": "prepare",
                            "image": image,
                            "command": ["/bin/sh", "-c", script, "prepare", *command],
                            "resources": {
                                "requests": {"cpu": "2", "memory": "8Gi"},
                                "limits": {"cpu": "2", "memory": "8Gi"},
                            },
                            "volumeMounts": [{"name": "dataset", "mountPath": dataset.path}],
                        }
                    ],
                    "volumes": [
                        {"name": "dataset", "persistentVolumeClaim": {"claimName": dataset.claim}}
                    ],
                },
            },
        },
    }
    header = (
        f"# Run {run}'s data preparation: once per run, before its ranks start. It writes\n"
        f"# claim {dataset.claim}, then {marker}, which {waits}.\n"
    )
    return header + dump(job)


def _check_mpi_implementation(
    profile: ClusterProfile, template: str, image: str | None, implementation: str | None
) -> None:
    if implementation is None:
        return
    if implementation not in MPI_IMPLEMENTATIONS:
        raise InputError(
            f"--mpi-implementation {implementation!r}: use {', '.join(MPI_IMPLEMENTATIONS)}"
        )
    if template != "mpijob" or not profile.mpi_v2:
        raise InputError(
            "--mpi-implementation applies to mpijob runs on a cluster whose MPIJobs belong "
            "to the MPI Operator (mpiOperator: mpi-operator)"
        )
    if implementation != "OpenMPI" and not image:
        raise InputError(
            f"--mpi-implementation {implementation}: the cluster's trainer image ships Open "
            f"MPI; give --image with {implementation} MPI installed"
        )


def _replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


def _add(path: str, value: Any) -> dict[str, Any]:
    # A copy each time: the same object twice would be written as a YAML alias.
    return {"op": "add", "path": path, "value": copy.deepcopy(value)}


def _args_ops(paths: list[str], args: list[str]) -> str:
    """Replace ops for the containers' args, written once through a YAML anchor."""
    listing = "[" + ", ".join(_scalar(a) for a in args) + "]"
    out = ""
    for index, path in enumerate(paths):
        value = f"&args {listing}" if index == 0 else "*args"
        if len(paths) == 1:
            value = listing
        out += f"- op: replace\n  path: {path}\n  value: {value}\n"
    return out


def _scalar(value: str) -> str:
    """A flow-sequence item every YAML reader takes for this very string: plain when it
    holds only letters, '_', '.', '/', '-' (and is no YAML 1.1 boolean or null), else
    quoted (kustomize reads 3e-4 as a number, PyYAML as a string)."""
    if _PLAIN.match(value) and value.lower() not in _YAML_WORDS:
        return value
    if value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    return json.dumps(value)


def _split_pinned(image: str) -> tuple[str, str, str]:
    name, _, digest = image.partition("@")
    tag = ""
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    if not digest and (not tag or tag == "latest"):
        raise InputError(f"--image {image!r}: pin the image to a release tag or a digest")
    return name, tag, digest


def _trainer_image(template: str, image: str) -> str:
    """A TrainJob's image is spec.trainer.image: the runtime holds the cluster's."""
    _split_pinned(image)
    if template == "trainjob-mpi":
        raise InputError(
            "--image on a trainjob-mpi run: the Trainer sets trainer.image on the MPI "
            "launcher only, while the ranks run in the nodes, which keep the runtime's "
            "image; change the cluster's image instead"
        )
    return image


def _image_override(profile: ClusterProfile, image: str) -> dict[str, Any]:
    name, tag, digest = _split_pinned(image)
    entry: dict[str, Any] = {"name": profile.image_name}
    if name != profile.image_name:
        entry["newName"] = name
    if digest:
        entry["digest"] = digest
    else:
        entry["newTag"] = tag
    return entry
