"""Launch consistency: torchrun's counts, rendezvous endpoints and argument lists."""

from __future__ import annotations

import re
from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy.engine import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, argv, gpu_count, is_int, mapping

_FLAG_VALUE = re.compile(r"^(--?[A-Za-z][\w.-]*) +\S")
SHELLS = ("sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env", "dash", "zsh")
# torchrun and the launchers that take its arguments (trainer-launch is torchrun with
# the failed worker's exit code).
TORCHRUN = ("torchrun", "torch.distributed.run", "trainer-launch", "trainer.launch")


def _flag(words: list[str], *names: str) -> tuple[str | None, int]:
    """Value of a flag given as --flag=value or --flag value, and its index."""
    for index, word in enumerate(words):
        for name in names:
            if word == name and index + 1 < len(words):
                return words[index + 1], index
            if word.startswith(name + "="):
                return word.split("=", 1)[1], index
    return None, -1


def _torchrun_words(container: dict) -> list[str] | None:
    words = argv(container)
    joined = " ".join(words)
    if not any(launcher in joined for launcher in TORCHRUN):
        return None
    if words and words[0].rsplit("/", 1)[-1] in SHELLS and "-c" in words:
        script = words[words.index("-c") + 1] if words.index("-c") + 1 < len(words) else ""
        rest = words[words.index("-c") + 3 :]  # after the script and $0
        return script.split() + rest
    return words


def _replicas(doc: Document, role: str) -> int | None:
    """Replicas of `role` (0 when the job has none; None when the count is not an integer,
    which the schema check reports)."""
    specs = mapping(mapping(doc.obj.get("spec")).get("pytorchReplicaSpecs"))
    if role not in specs:
        return 0
    count = mapping(specs[role]).get("replicas", 1)
    return count if is_int(count) else None


@resource_rule(
    id="torchrun-nnodes",
    severity=ERROR,
    title="torchrun --nnodes agrees with the job's replicas",
    why="A hard-coded --nnodes that differs from the number of pods makes rendezvous wait "
    "forever for nodes that never come, or start without some of them. The operator already "
    "passes the right value in PET_NNODES.",
    fix="Drop --nnodes (torchrun reads PET_NNODES), or make it Master + Worker replicas (min:max "
    "of elasticPolicy for elastic jobs).",
    kinds=("PyTorchJob",),
)
def nnodes(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    elastic = spec.get("elasticPolicy") or {}
    master, worker = _replicas(doc, "Master"), _replicas(doc, "Worker")
    if master is None or worker is None:
        return  # a replica count that is not a number: the schema check reports it
    total = master + worker
    for pod in ctx.pods(doc):
        for index, container in enumerate(pod.containers):
            words = _torchrun_words(container)
            value, _ = _flag(words or [], "--nnodes")
            if value is None or value.startswith("$"):
                continue
            at = pod.container_path(index)
            if elastic:
                low = elastic.get("minReplicas", elastic.get("maxReplicas"))
                high = elastic.get("maxReplicas", low)
                expected = f"{low}:{high}"
                if value not in (expected, str(high)) and value != f"{low}:{high}":
                    yield Violation(f"--nnodes={value} but elasticPolicy allows {expected}", at)
            elif value != str(total):
                yield Violation(f"--nnodes={value} but the job has {total} pods", at)


@resource_rule(
    id="torchrun-nproc-per-node",
    severity=ERROR,
    title="Processes per node match the GPUs each pod gets",
    why="With more processes than GPUs, ranks share a GPU (or crash on CUDA device ordinals); "
    "with fewer, GPUs sit idle for the whole run.",
    fix="Set spec.nprocPerNode (and any --nproc_per_node) to the GPUs in the container's limits.",
    kinds=("PyTorchJob",),
)
def nproc_per_node(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    declared = spec.get("nprocPerNode") or (spec.get("elasticPolicy") or {}).get("nProcPerNode")
    for pod in ctx.pods(doc):
        for index, container in enumerate(pod.containers):
            gpus = gpu_count(container)
            if not gpus:
                continue
            value, _ = _flag(
                _torchrun_words(container) or [], "--nproc_per_node", "--nproc-per-node"
            )
            for source, given in (("--nproc_per_node", value), ("nprocPerNode", declared)):
                if given is None or str(given) in ("gpu", "auto") or str(given).startswith("$"):
                    continue
                if str(given) != str(gpus):
                    yield Violation(
                        f"{source}={given} but the container gets {gpus} GPUs",
                        pod.container_path(index),
                    )


@resource_rule(
    id="rendezvous-endpoint",
    severity=ERROR,
    title="Rendezvous endpoints name pods and variables the job has",
    why="Only jobs with a Master get MASTER_ADDR/MASTER_PORT and a <job>-master-0 Service; an "
    "elastic Worker-only job gets PET_RDZV_ENDPOINT instead. An endpoint naming something "
    "that does not exist leaves every worker waiting in rendezvous.",
    fix="In Worker-only jobs drop --rdzv_endpoint and let torchrun read PET_RDZV_ENDPOINT; use "
    "$(MASTER_ADDR) only with a Master replica.",
    kinds=("PyTorchJob",),
)
def rendezvous(doc: Document, ctx: Context) -> Iterator[Violation]:
    has_master = _replicas(doc, "Master") != 0
    for pod in ctx.pods(doc):
        for index, container in enumerate(pod.containers):
            words = _torchrun_words(container) or argv(container)
            value, _ = _flag(
                words, "--rdzv_endpoint", "--rdzv-endpoint", "--master_addr", "--master-addr"
            )
            if value is None:
                continue
            at = pod.container_path(index)
            if "$(MASTER_ADDR)" in value and not has_master:
                yield Violation(
                    f"{value}: the operator injects MASTER_ADDR only when the job has a Master", at
                )
            host = value.split(":", 1)[0]
            if host.endswith("-master-0") and not has_master:
                yield Violation(f"{value}: the job has no Master replica, so no {host}", at)
            elif host.endswith("-master-0") and host != f"{doc.name}-master-0":
                yield Violation(f"{value} names another job's master (this job is {doc.name})", at)


@resource_rule(
    id="elastic-rdzv-id",
    severity=ERROR,
    title="Elastic jobs set their own rendezvous id",
    why="torchrun's default rendezvous id is the literal 'none': elastic jobs sharing a "
    "rendezvous backend can join each other's groups.",
    fix="Set spec.elasticPolicy.rdzvId to something unique per job (its name).",
    kinds=("PyTorchJob",),
)
def rdzv_id(doc: Document, ctx: Context) -> Iterator[Violation]:
    elastic = (doc.obj.get("spec") or {}).get("elasticPolicy")
    if isinstance(elastic, dict) and not elastic.get("rdzvId"):
        yield Violation(
            "elasticPolicy has no rdzvId (torchrun uses 'none')", ("spec", "elasticPolicy")
        )


@pod_rule(
    id="argument-packs-flag-and-value",
    severity=ERROR,
    title="Each flag and its value are separate argument elements",
    why="Kubernetes passes each list element as one argv entry without a shell: '-x "
    "NCCL_DEBUG=INFO' reaches mpirun as a single unknown option, '--nnodes 2' as a flag "
    "named '--nnodes 2'.",
    fix="Split the element: [-x, NCCL_DEBUG=INFO], or write --flag=value.",
)
def packed_argument(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        for key in ("command", "args"):
            words = container.get(key)
            if not isinstance(words, list):
                continue
            shell_script = None
            full = argv(container)
            if full and full[0].rsplit("/", 1)[-1] in SHELLS and "-c" in full:
                shell_script = full.index("-c") + 1
            offset = 0 if key == "command" else len(container.get("command") or [])
            for position, word in enumerate(words):
                if shell_script is not None and offset + position == shell_script:
                    continue
                if isinstance(word, str) and _FLAG_VALUE.match(word):
                    yield Violation(
                        f"{word!r} is one argument: split the flag from its value",
                        (*pod.container_path(index), key, position),
                    )


@pod_rule(
    id="shell-without-exec",
    severity=WARNING,
    title="A shell that starts torchrun or mpirun hands over with exec",
    why="Without exec the shell stays PID 1 and does not forward SIGTERM: torchrun never gets "
    "the signal, the trainer never writes its emergency checkpoint, and the pod is killed "
    "at the end of the grace period.",
    fix="Start the launcher with exec: sh -c 'exec trainer-launch ...' (or 'exec torchrun ...').",
)
def shell_without_exec(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        words = argv(container)
        if not words or words[0].rsplit("/", 1)[-1] not in SHELLS or "-c" not in words:
            continue
        position = words.index("-c") + 1
        script = words[position] if position < len(words) else ""
        for launcher in ("torchrun", "trainer-launch", "mpirun", "python -m torch.distributed.run"):
            if launcher in script and f"exec {launcher}" not in script:
                yield Violation(
                    f"the shell starts {launcher} without exec",
                    pod.container_path(index),
                    severity=WARNING,
                )
                break


@resource_rule(
    id="exitcode-policy-launcher",
    severity=WARNING,
    title="restartPolicy ExitCode runs a launcher that reports the worker's exit code",
    why="Plain torchrun exits 1 whenever a worker fails and whenever it is stopped, whatever "
    "the cause. Under restartPolicy ExitCode (1-127 permanent, 128-255 retried) every "
    "preemption, lost peer or hang then fails the job for good instead of restarting it.",
    fix="Start the workers with trainer-launch (torchrun's arguments, the failed worker's exit "
    "code), or use restartPolicy OnFailure.",
    kinds=("PyTorchJob",),
)
def exitcode_policy_launcher(doc: Document, ctx: Context) -> Iterator[Violation]:
    replicas = (doc.obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    for pod in ctx.pods(doc):
        replica = replicas.get(pod.role) if isinstance(replicas, dict) else None
        if not isinstance(replica, dict) or replica.get("restartPolicy") != "ExitCode":
            continue
        for index, container in enumerate(pod.containers):
            words = _torchrun_words(container)
            if words is None or any(
                w.endswith(("trainer-launch", "trainer.launch")) for w in words
            ):
                continue
            yield Violation(
                f"{pod.role} restarts on exit codes, but torchrun exits 1 for every failure",
                pod.container_path(index),
            )
