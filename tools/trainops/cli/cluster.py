"""`trainops new-cluster`, `set` and `new-run`: write overlays and runs from a profile."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import click

from trainops.appsets import argocd_appsets, name_taken
from trainops.cli.common import complete_clusters, make_renderer, project_config
from trainops.errors import InputError
from trainops.profile.edit import parse_assignment, short_form
from trainops.profile.model import (
    FABRICS,
    FIELD_DOCS,
    FIELD_TYPES,
    GPUDIRECT,
    MONITORING,
    MPI_OPERATORS,
    NETWORKS,
    OFED_SOURCES,
    PLACEMENTS,
    RDMA_PROVIDERS,
    REQUIRED,
    SCHEDULERS,
    TRAINERS,
    ProfileError,
    parse_profile,
)
from trainops.profile.run_scope import RunScope, run_path
from trainops.profile.runs import (
    DEFAULT_DATA_PATH,
    FAILURE_CAUSES,
    MPI_IMPLEMENTATIONS,
    TEMPLATES,
    RunOptions,
)
from trainops.profile.writer import (
    FileChange,
    WriteResult,
    apply_changes,
    edit_lock,
    plan_set,
    profile_values,
    write_cluster,
    write_run,
)
from trainops.render.discover import display_path
from trainops.yamlio import load_yaml_mapping, read_text


def _refuse_taken_application_name(root: Path, directory: str) -> None:
    """A run whose Argo CD Application would take another directory's name is never
    synced, or stops the other from syncing (run-application-name-unique)."""
    if (root / directory).is_dir():
        return  # rewriting an existing run: validate reports a conflict it already has
    renderer, _ = make_renderer(project_config())
    taken = name_taken(root, argocd_appsets(root, renderer), directory)
    if taken is not None:
        raise InputError(
            f"the run's Argo CD Application would be named {taken.name}, as that of "
            f"{', '.join(taken.others)} is, and only one of them would ever sync: "
            "pick another run name"
        )


def repository_root() -> Path:
    config = project_config()
    return config.root or Path.cwd()


def report(result: WriteResult) -> None:
    for path in result.written:
        click.echo(f"wrote    {display_path(path)}")
    for path in result.removed:
        click.echo(f"removed  {display_path(path)}")
    if not result.changed:
        click.echo(f"unchanged ({len(result.unchanged)} files already up to date)")


@click.command("new-cluster")
@click.argument("name")
@click.option("--fabric", type=click.Choice(FABRICS), help=FIELD_DOCS["fabric"])
@click.option("--gpus-per-node", type=int, help=FIELD_DOCS["gpusPerNode"])
@click.option("--nodes", type=int, help=FIELD_DOCS["nodes"])
@click.option(
    "--network",
    type=click.Choice(sorted({n for names in NETWORKS.values() for n in names})),
    help=FIELD_DOCS["network"],
)
@click.option("--nic", help=FIELD_DOCS["nic"])
@click.option("--ip-range", metavar="CIDR", help=FIELD_DOCS["ipRange"])
@click.option("--pkey", help=FIELD_DOCS["pkey"])
@click.option("--gpudirect", type=click.Choice(GPUDIRECT), help=FIELD_DOCS["gpudirect"])
@click.option("--hca", multiple=True, help=FIELD_DOCS["hca"] + " (repeat or comma-separate)")
@click.option("--gid-index", type=int, help=FIELD_DOCS["gidIndex"])
@click.option("--rdma-resource", help=FIELD_DOCS["rdmaResource"])
@click.option("--rdma-per-pod", type=int, help=FIELD_DOCS["rdmaPerPod"])
@click.option(
    "--pf-names", multiple=True, help=FIELD_DOCS["pfNames"] + " (repeat or comma-separate)"
)
@click.option("--nic-device-id", help=FIELD_DOCS["nicDeviceId"])
@click.option("--storage-class", help=FIELD_DOCS["storageClass"])
@click.option("--scheduler", type=click.Choice(SCHEDULERS), help=FIELD_DOCS["scheduler"])
@click.option("--queue", help=FIELD_DOCS["queue"])
@click.option("--gpu-product", help=FIELD_DOCS["gpuProduct"])
@click.option(
    "--node-allocatable",
    metavar="CPU,MEMORY",
    help="what one GPU node offers pods, e.g. 190,1900Gi (nodeAllocatable: "
    "kubectl get node NODE -o jsonpath='{.status.allocatable}'); training pods are sized "
    "to fit it",
)
@click.option("--topology-key", help=FIELD_DOCS["topologyKey"])
@click.option("--image", help=FIELD_DOCS["image"])
@click.option("--trainer", type=click.Choice(TRAINERS), help=FIELD_DOCS["trainer"])
@click.option("--mpi-operator", type=click.Choice(MPI_OPERATORS), help=FIELD_DOCS["mpiOperator"])
@click.option("--placement", type=click.Choice(PLACEMENTS), help=FIELD_DOCS["placement"])
@click.option(
    "--topology",
    "topology_levels",
    metavar="LABEL=NODES,...",
    help="network levels, outermost first, each a node label and the nodes in one of its "
    "domains, e.g. example.com/block=32,topology.kubernetes.io/rack=8",
)
@click.option(
    "--teams",
    metavar="NAME=GPUS,...",
    help="the teams sharing the cluster and their GPU quotas, e.g. vision=32,nlp=16 "
    "(limits and priorities per team: cluster.yaml's teams)",
)
@click.option("--spare-nodes", type=int, help=FIELD_DOCS["spareNodes"])
@click.option("--rdma-provider", type=click.Choice(RDMA_PROVIDERS), help=FIELD_DOCS["rdmaProvider"])
@click.option("--ofed", type=click.Choice(OFED_SOURCES), help=FIELD_DOCS["ofed"])
@click.option(
    "--installed",
    multiple=True,
    help=FIELD_DOCS["installed"] + " (repeat or comma-separate)",
)
@click.option("--monitoring", type=click.Choice(MONITORING), help=FIELD_DOCS["monitoring"])
@click.option(
    "--from",
    "from_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the profile from a YAML file (a cluster.yaml) instead of flags.",
)
@click.option("--force", is_flag=True, help="Replace an existing overlay's different profile.")
def new_cluster(name, from_file, force, **flags):
    """Create overlays/NAME/ for a GPU cluster from its profile.

    Writes cluster.yaml (the profile, commented) and everything derived from
    it: the platform kustomization with its patches (training network, storage,
    queues; with --trainer v2 or both, the cluster's ClusterTrainingRuntimes
    under training/runtimes/), the cluster Component under training/cluster/
    and the job templates (training/{pytorchjob,elastic,mpijob,trainjob,...}/,
    as the profile calls for) and the NCCL preflight. argocd/projects.yaml gets
    the new cluster as a destination; the ApplicationSets pick the overlay up
    from its cluster.yaml with no other edit. Register the cluster in Argo CD
    under the same NAME.

    Running it again with the same settings changes nothing; different settings
    need --force (or `trainops set NAME KEY=VALUE` for a single key).

    \b
    Example:
      trainops new-cluster gpu-east --fabric roce --gpus-per-node 8 --nodes 4 \\
        --rdma-per-pod 2 --gid-index 3 --rdma-resource nvidia.com/roce_vf \\
        --storage-class cephfs --scheduler kueue --image ghcr.io/acme/trainer:1.2.0
    """
    if from_file is not None:
        given = [k for k, v in flags.items() if v not in (None, ())]
        if given:
            raise InputError(f"--from reads the whole profile; drop --{given[0].replace('_', '-')}")
        values = profile_values(load_yaml_mapping(read_text(from_file), str(from_file)))
    else:
        values = _values_from_flags(flags)
    report(write_cluster(repository_root(), name, values, force))
    click.echo(f"next: trainops validate overlays/{name}")


def _values_from_flags(flags: dict) -> dict:
    names = {
        "fabric": "fabric",
        "gpus_per_node": "gpusPerNode",
        "nodes": "nodes",
        "network": "network",
        "nic": "nic",
        "ip_range": "ipRange",
        "pkey": "pkey",
        "gpudirect": "gpudirect",
        "gid_index": "gidIndex",
        "rdma_resource": "rdmaResource",
        "rdma_per_pod": "rdmaPerPod",
        "storage_class": "storageClass",
        "scheduler": "scheduler",
        "queue": "queue",
        "gpu_product": "gpuProduct",
        "topology_key": "topologyKey",
        "image": "image",
        "trainer": "trainer",
        "mpi_operator": "mpiOperator",
        "placement": "placement",
        "spare_nodes": "spareNodes",
        "rdma_provider": "rdmaProvider",
        "ofed": "ofed",
        "monitoring": "monitoring",
        "nic_device_id": "nicDeviceId",
    }
    values = {}
    for flag, key in names.items():
        if flags.get(flag) is not None:
            values[key] = flags[flag]
    hca = [device for entry in flags.get("hca") or () for device in entry.split(",") if device]
    if hca:
        values["hca"] = hca
    pf_names = [name for entry in flags.get("pf_names") or () for name in entry.split(",") if name]
    if pf_names:
        values["pfNames"] = pf_names
    installed = [
        part for entry in flags.get("installed") or () for part in entry.split(",") if part
    ]
    if installed:
        values["installed"] = installed
    for flag, key in (
        ("node_allocatable", "nodeAllocatable"),
        ("teams", "teams"),
        ("topology_levels", "topology"),
    ):
        if flags.get(flag):
            option = "--topology" if key == "topology" else f"--{flag.replace('_', '-')}"
            values[key] = short_form(key, flags[flag], option)
    missing = _missing_keys(values)
    if missing:
        named = ", ".join(_flag_name(key) for key in missing)
        plural = "s" if len(missing) > 1 else ""
        raise InputError(f"missing required flag{plural}: {named} (or give --from FILE)")
    return dict(sorted(values.items(), key=lambda kv: list(FIELD_DOCS).index(kv[0])))


def _missing_keys(values: dict) -> list[str]:
    """Every required key the flags leave out, at once. Which keys a fabric needs
    (hca, rdmaResource, nic...) is the profile's own check: it is asked with a stand-in
    for each key it reports missing until it reports none."""
    missing = [key for key in REQUIRED if values.get(key) in (None, "")]
    if "fabric" in missing:
        return missing  # what else is needed depends on the fabric
    trial = {**values, **{key: _stand_in(key) for key in missing}}
    trial["image"] = values.get("image") or "registry.invalid/stand-in:1"
    for _ in FIELD_TYPES:
        try:
            parse_profile(trial, "stand-in")
        except ProfileError as exc:
            key, _, problem = exc.message.partition(": ")
            if not problem.startswith("is required") or key not in FIELD_TYPES or key in trial:
                break
            missing.append(key)
            trial[key] = _stand_in(key)
        else:
            break
    return missing


def _stand_in(key: str):
    kind = FIELD_TYPES[key]
    kind = kind[0] if isinstance(kind, tuple) else kind
    return {int: 1, list: ["stand_in"], dict: {}}.get(kind, "stand-in")


def _flag_name(key: str) -> str:
    """The new-cluster flag that sets a profile key (`gpusPerNode` -> --gpus-per-node)."""
    flag = "".join(f"-{c.lower()}" if c.isupper() else c for c in key)
    known = {p.name.replace("_", "-") for p in new_cluster.params}
    return f"--{flag}" if flag in known else f"{key} (in --from FILE)"


@click.command("set")
@click.argument("overlay", shell_complete=complete_clusters)
@click.argument("assignments", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Print the diff, write nothing.")
def set_profile(overlay, assignments, dry_run):
    """Change keys of a cluster profile and regenerate its overlay.

    OVERLAY is the cluster name or its directory (overlays/NAME). Each
    ASSIGNMENT is KEY=VALUE, MAP.NAME=VALUE for a map key such as nccl, or KEY-
    (MAP.NAME-) to remove one. The edit keeps the profile's comments, key order
    and quoting; a new key arrives with its documentation comment. Values take
    the key's type: nodes=6 is a number, hca=mlx5_0,mlx5_1 a list, nccl values
    are strings, gpuHealth.level=3 a number. teams, topology and
    nodeAllocatable also take new-cluster's forms (teams=vision=32,nlp=16,
    nodeAllocatable=190,1900Gi) besides YAML ([{name: vision, gpus: 32}]).
    The new profile is checked before anything is written, then the unified
    diff of every changed file is printed. With no ASSIGNMENT, the
    overlay is regenerated from cluster.yaml as it is (what validate's
    profile-drift check asks for). Edits take turns (one lock per repository)
    and are all or nothing: derived files are written first and cluster.yaml
    last; a failed write puts everything back and exits 2.

    \b
    Examples:
      trainops set prod-roce nodes=24
      trainops set prod-roce nccl.NCCL_IB_TIMEOUT=23 nccl.NCCL_IB_RETRY_CNT-
      trainops set overlays/lab-tcp placement=pack --dry-run
      trainops set prod-roce teams=vision=64,nlp=32
    """
    name = Path(overlay).name if os.sep in overlay else overlay
    root = repository_root()
    parsed = [parse_assignment(text) for text in assignments]
    with edit_lock(root):
        changes = plan_set(root, name, parsed)
        if changes and not dry_run:
            result = apply_changes(root, changes)
    click.echo(unified_diff(changes, root), nl=False)
    if not changes:
        click.echo(f"unchanged: overlays/{name} already has these settings")
    elif dry_run:
        click.echo(f"dry run: {len(changes)} file(s) would change")
    else:
        click.echo(
            f"{len(result.written) + len(result.removed)} file(s) changed; next: "
            f"trainops validate overlays/{name}"
        )


def unified_diff(changes: list[FileChange], root: Path) -> str:
    chunks = []
    for change in changes:
        shown = change.path.relative_to(root)
        chunks.extend(
            difflib.unified_diff(
                (change.old or "").splitlines(keepends=True),
                (change.new or "").splitlines(keepends=True),
                fromfile="/dev/null" if change.old is None else f"a/{shown}",
                tofile="/dev/null" if change.new is None else f"b/{shown}",
            )
        )
    return "".join(chunks)


@click.command("new-run", context_settings={"ignore_unknown_options": True})
@click.argument("cluster", shell_complete=complete_clusters)
@click.argument("run")
@click.option(
    "--template",
    type=click.Choice(list(TEMPLATES)),
    default="pytorchjob",
    show_default=True,
    help="pytorchjob: Master + Workers; elastic: Workers that may shrink and grow; "
    "mpijob: mpirun launcher + Workers (kubeflow.org/v1, or v2beta1 where the cluster "
    "runs the MPI Operator); trainjob: a Trainer v2 TrainJob on the cluster's torch "
    "runtime; trainjob-mpi: one on its MPI runtime; torchtitan: a pytorchjob that runs "
    "torchtitan (docs/torchtitan.md), whose arguments after `--` are torchtitan's and "
    "must name --module and --config. The cluster's profile decides which it offers.",
)
@click.option(
    "--nodes",
    type=int,
    required=True,
    help="Nodes (pods) the run uses; 1 on pytorchjob or torchtitan is the Master alone.",
)
@click.option(
    "--image",
    help="Image for this run (tag or digest); default: the cluster's trainer image. An "
    "image of your own needs the trainops-trainer package (trainer-launch) for torchrun "
    "templates.",
)
@click.option(
    "--command",
    help="The program to run instead of the reference trainer, split as a shell would: "
    "'python train.py', 'python -m my.pkg', 'torchrun train.py', 'accelerate launch "
    "train.py'. torchrun templates run it under trainer-launch (one process per GPU, or "
    "once when it is a launcher itself); MPI templates on every slot. Arguments after "
    "`--` follow it.",
)
@click.option(
    "--dataset-claim",
    metavar="NAME[:PATH]",
    help=f"Mount the PersistentVolumeClaim NAME read-only at PATH (default "
    f"{DEFAULT_DATA_PATH}) wherever the ranks run.",
)
@click.option(
    "--prepare",
    metavar="COMMAND",
    help="Data preparation, split as a shell would: runs once per run in a Job of its own "
    "with the dataset claim writable (Argo CD sync wave -1); the ranks wait for its marker "
    "file (torchrun runs in trainer-launch, through TRAINER_WAIT_FOR_FILE; MPI runs in an init "
    "container). Needs --dataset-claim.",
)
@click.option(
    "--failure-pattern",
    "failure_patterns",
    multiple=True,
    metavar="CAUSE=TEXT",
    help="Repeatable: a line of the workers' output containing TEXT means CAUSE (one of "
    f"{', '.join(FAILURE_CAUSES)}), before trainer-launch's own patterns; e.g. "
    "transient=S3 SlowDown retries a flaky download, bug=MyCheckError stops for good.",
)
@click.option(
    "--mpi-implementation",
    type=click.Choice(MPI_IMPLEMENTATIONS),
    help="mpijob runs on an MPI Operator cluster: the MPI the image ships (default OpenMPI; "
    "Intel and MPICH need --image and get Hydra's mpirun, which passes the whole launcher "
    "environment).",
)
@click.option(
    "--team",
    help="The team the run belongs to: written to teams/TEAM/runs/RUN/, in the team's "
    "namespace and queue.",
)
@click.option(
    "--priority",
    help="Priority name from the cluster's profile (default: standard where the team may use "
    "it, else its lowest).",
)
@click.option(
    "--topology",
    metavar="required:LABEL|preferred:LABEL",
    help="Kueue clusters with topology levels: keep the run's pods in one domain of the "
    "level LABEL (required: wait until one has room; preferred: fall back to fewer domains).",
)
@click.option("--force", is_flag=True, help="Overwrite a run that was never synced.")
@click.argument("program_args", nargs=-1, type=click.UNPROCESSED)
def new_run(
    cluster,
    run,
    template,
    nodes,
    image,
    command,
    dataset_claim,
    prepare,
    failure_patterns,
    mpi_implementation,
    team,
    priority,
    topology,
    force,
    program_args,
):
    """Create overlays/CLUSTER/runs/RUN/ (with --team, teams/TEAM/runs/RUN/): a job named
    RUN on the cluster's template.

    Arguments after `--` are the program's: the reference trainer's, or with
    --command your own (they replace the template's):

    \b
      trainops new-run prod-roce llama-sft-0412 --template pytorchjob --nodes 4 \\
        -- --model gpt --dataset tokens --data-path /data/tokens.bin --max-steps 20000
      trainops new-run prod-roce my-sft-0413 --template pytorchjob --nodes 4 \\
        --image registry.example.com/my-train:1.4 --command "python train.py" \\
        --dataset-claim corpus-v3:/data -- --lr 3e-4 --epochs 2
      trainops new-run prod-roce llama3-8b-0414 --template torchtitan --nodes 4 \
        --image ghcr.io/example-org/trainops-torchtitan:0.3.0 \
        --dataset-claim c4-en:/data -- --module llama3 --config llama3_8b \
        --hf_assets_path /data/tokenizer --dataloader.dataset_path /data/c4

    The run sets only what a run changes: its name, replicas (and for elastic
    runs min/max and a rendezvous id; with Volcano, minAvailable), the image,
    the program and its arguments, the dataset; a TrainJob run sets numNodes,
    trainer.image, trainer.args and runtimePatches. The cluster's template keeps
    the launcher, fabric, NCCL settings, /dev/shm, checkpoint volume, grace
    period, placement and queue. Push the directory and Argo CD starts the run.
    """
    options = RunOptions(
        template=template,
        nodes=nodes,
        image=image,
        args=list(program_args) if program_args else None,
        command=command,
        mpi_implementation=mpi_implementation,
        dataset_claim=dataset_claim,
        prepare=prepare,
        failure_patterns=list(failure_patterns),
        scope=RunScope(team, priority, topology),
    )
    root = repository_root()
    _refuse_taken_application_name(root, f"overlays/{cluster}/{run_path(team, run)}")
    report(write_run(root, cluster, run, options, force))
    click.echo(f"next: trainops validate overlays/{cluster}/{run_path(team, run)}")
