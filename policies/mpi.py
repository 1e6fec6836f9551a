"""MPIJob: a launcher that forwards the environment, computes nothing, and counts right."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy.engine import Context, Violation, resource_rule
from trainops.policy.pods import argv, env_of, is_int


def _roles(doc: Document, ctx: Context) -> dict:
    return {pod.role: pod for pod in ctx.pods(doc)}


def _forwarded(words: list[str]) -> set[str]:
    out = set()
    for index, word in enumerate(words):
        if word in ("-x", "--x") and index + 1 < len(words):
            out.add(words[index + 1].split("=", 1)[0])
        elif word.startswith("-x ") or word.startswith("-x="):
            out.add(word[3:].split("=", 1)[0].strip())
    return out


@resource_rule(
    id="mpi-forwards-nccl",
    severity=ERROR,
    title="The MPI launcher forwards every NCCL variable to the ranks",
    why="mpirun starts the ranks with the launcher's environment minus everything it is not "
    "told to export: NCCL variables set on the workers or the launcher reach the ranks only "
    "through -x NAME, so the ranks run with NCCL's defaults (often TCP on eth0).",
    fix="Add -x NAME to the launcher's mpirun for each NCCL_* variable (and set it on the "
    "launcher).",
    kinds=("MPIJob",),
)
def forwards_nccl(doc: Document, ctx: Context) -> Iterator[Violation]:
    roles = _roles(doc, ctx)
    launcher, worker = roles.get("Launcher"), roles.get("Worker")
    if launcher is None or not launcher.containers:
        return
    container = launcher.containers[0]
    forwarded = _forwarded(argv(container))
    wanted: set[str] = set()
    for pod in (launcher, worker):
        for c in pod.containers if pod else []:
            wanted |= {name for name in env_of(c) if name.startswith("NCCL_")}
    for name in sorted(wanted - forwarded):
        yield Violation(
            f"mpirun does not forward {name} (no -x {name})",
            (*launcher.container_path(0), "command"),
        )


@resource_rule(
    id="mpi-launcher-gpus",
    severity=WARNING,
    title="The MPI launcher holds no GPUs",
    why="The launcher only runs mpirun; GPUs it requests sit idle for the whole job.",
    fix="Remove GPU requests from the Launcher; give it a little CPU and memory.",
    kinds=("MPIJob",),
)
def launcher_gpus(doc: Document, ctx: Context) -> Iterator[Violation]:
    launcher = _roles(doc, ctx).get("Launcher")
    if launcher is not None and launcher.gpus:
        yield Violation(f"the Launcher requests {launcher.gpus} GPU(s)", launcher.path)


@resource_rule(
    id="mpi-slots",
    severity=ERROR,
    title="MPI ranks match GPUs: -np and slotsPerWorker",
    why="slotsPerWorker is the ranks per worker pod and should be its GPU count; -np must be "
    "Worker replicas x slotsPerWorker or mpirun oversubscribes or leaves GPUs unused.",
    fix="slotsPerWorker = GPUs per worker; -np = replicas x slotsPerWorker (or omit -np).",
    kinds=("MPIJob",),
)
def slots(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    per_worker = spec.get("slotsPerWorker", 1)
    if not is_int(per_worker):
        return  # the schema check reports it
    roles = _roles(doc, ctx)
    worker, launcher = roles.get("Worker"), roles.get("Launcher")
    if worker is not None and worker.gpus and worker.gpus != per_worker:
        yield Violation(
            f"slotsPerWorker is {per_worker} but each worker has {worker.gpus} GPUs",
            ("spec", "slotsPerWorker"),
        )
    if worker is None or launcher is None or not launcher.containers:
        return
    words = argv(launcher.containers[0])
    for index, word in enumerate(words):
        value = None
        if word in ("-np", "-n", "--np", "-c") and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith(("-np=", "--np=")):
            value = word.split("=", 1)[1]
        if value is not None and value.isdigit():
            expected = (worker.replicas or 1) * per_worker
            if int(value) != expected:
                yield Violation(
                    f"-np {value} but {worker.replicas} workers x {per_worker} slots = {expected}",
                    (*launcher.container_path(0), "args"),
                )
            break
