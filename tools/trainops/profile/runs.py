"""Generates a run: a kustomization on the cluster's job template that sets only
what a run changes (name, image tag, arguments, replicas, and what follows
from them: elastic bounds and rendezvous id, Volcano's minAvailable; for an
MPI Operator v2 run on another MPI implementation, that and its mpirun; for a
TrainJob, numNodes and the trainer's arguments)."""

from __future__ import annotations

import re
from typing import Any

from trainops.errors import InputError
from trainops.profile.model import ClusterProfile
from trainops.profile.overlay import templates
from trainops.profile.run_scope import RunScope, run_path, scope_ops
from trainops.yamlio import dump

TEMPLATES = {
    "pytorchjob": "PyTorchJob",
    "elastic": "PyTorchJob",
    "mpijob": "MPIJob",
    "trainjob": "TrainJob",
    "trainjob-mpi": "TrainJob",
}
TEMPLATE_NAMES = {
    "pytorchjob": "train",
    "elastic": "train-elastic",
    "mpijob": "train-mpi",
    "trainjob": "train",
    "trainjob-mpi": "train-mpi",
}
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
# Hydra's mpirun (Intel MPI, MPICH) passes the launcher's whole environment to the
# ranks and knows none of Open MPI's -x or --bind-to: the template's command is
# replaced, not patched.
HYDRA_COMMAND = ["mpirun", "python", "-m", "trainer"]
_RUN_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_RUN_NAME = 45  # pods are named <job>-worker-<n> and must stay within 63 characters


def check_run_name(name: str) -> None:
    if not _RUN_NAME.match(name) or len(name) > MAX_RUN_NAME:
        raise InputError(
            f"run name {name!r} must be a DNS-1035 label (lowercase letters, digits, '-', "
            f"starting with a letter) of at most {MAX_RUN_NAME} characters"
        )


def generate_run(
    profile: ClusterProfile,
    name: str,
    template: str,
    nodes: int,
    image: str | None = None,
    args: list[str] | None = None,
    mpi_implementation: str | None = None,
    scope: RunScope | None = None,
) -> str:
    """The run's kustomization.yaml."""
    check_run_name(name)
    if template not in TEMPLATES:
        raise InputError(f"unknown template {template!r}: use {', '.join(TEMPLATES)}")
    offered = templates(profile)
    if template not in offered or template == "preflight":
        usable = ", ".join(t for t in offered if t in TEMPLATES)
        raise InputError(
            f"cluster {profile.name} has no {template} template (trainer: {profile.trainer}, "
            f"mpiOperator: {profile.mpiOperator}): use {usable}"
        )
    _check_mpi_implementation(profile, template, image, mpi_implementation)
    if nodes < 1 or nodes > profile.nodes:
        raise InputError(f"--nodes must be between 1 and the cluster's {profile.nodes} nodes")
    if template == "pytorchjob" and nodes < 2:
        raise InputError(
            "a pytorchjob run needs --nodes >= 2 (one Master plus Workers; Worker replicas 0 "
            "still creates a worker in the operator); use --template elastic for one node"
        )
    ops: list[dict[str, Any]] = [{"op": "replace", "path": "/metadata/name", "value": name}]
    pods = nodes
    if template == "pytorchjob":
        ops.append(_replace("/spec/pytorchReplicaSpecs/Worker/replicas", nodes - 1))
        containers = [
            "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0/args",
            "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/args",
        ]
    elif template == "elastic":
        minimum = (nodes + 1) // 2
        ops += [
            _replace("/spec/pytorchReplicaSpecs/Worker/replicas", nodes),
            _replace("/spec/elasticPolicy/minReplicas", minimum),
            _replace("/spec/elasticPolicy/maxReplicas", nodes),
            # Each run needs its own rendezvous id; torchrun's default is "none".
            _replace("/spec/elasticPolicy/rdzvId", name),
        ]
        containers = ["/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/args"]
    elif TEMPLATES[template] == "TrainJob":
        # The runtime's PodGroup (Volcano) and Kueue's workload count the pods themselves.
        ops.append(_replace("/spec/trainer/numNodes", nodes))
        containers = ["/spec/trainer/args"]
        if image:
            ops.append(
                {
                    "op": "add",
                    "path": "/spec/trainer/image",
                    "value": _trainer_image(template, image),
                }
            )
    else:
        ops.append(_replace("/spec/mpiReplicaSpecs/Worker/replicas", nodes))
        containers = ["/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/args"]
        pods = nodes + 1
        if mpi_implementation not in (None, "OpenMPI"):
            ops.append(_replace("/spec/mpiImplementation", mpi_implementation))
            ops.append(
                _replace(
                    "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/command",
                    HYDRA_COMMAND,
                )
            )
    if profile.scheduler == "volcano" and TEMPLATES[template] != "TrainJob":
        # Gang scheduling: the PodGroup admits the job only when every pod fits.
        ops.append(_replace("/spec/runPolicy/schedulingPolicy/minAvailable", pods))
    scope = scope or RunScope()
    ops += scope_ops(profile, template, TEMPLATES[template], scope)
    patch = dump(ops)
    if args is not None:
        patch += _args_ops(containers, args)
    up = "../" * run_path(scope.team, name).count("/") + "../"
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{up}training/{template}"],
    }
    if scope.team:
        doc["namespace"] = scope.team
    if image and TEMPLATES[template] != "TrainJob":
        doc["images"] = [_image_override(profile, image)]
    doc["patches"] = [
        {
            "target": {"kind": TEMPLATES[template], "name": TEMPLATE_NAMES[template]},
            "patch": patch.rstrip("\n"),
        }
    ]
    header = (
        f"# Run {name} on cluster {profile.name}: the cluster's {template} template plus\n"
        "# what this run changes. Runs are immutable once synced: start a new run\n"
        "# (a new directory) instead of editing this one.\n"
    )
    return header + dump(doc)


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
    text = dump(value).strip()
    return text.removesuffix("\n...").strip()


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
