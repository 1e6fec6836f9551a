"""Training frameworks' own argument and config checks, done before the job starts:
Megatron-LM's `validate_args` (and the TransformerConfig and parallel-state checks it
leads to) over a pod's command line, and DeepSpeed's config (with the Hugging Face
Trainer's sync of it) when the config file is a ConfigMap of the render.

Facts from Megatron-LM core_v0.19.0 (`megatron/training/arguments.py`,
`megatron/core/transformer/transformer_config.py`, `megatron/core/parallel_state.py`,
`megatron/core/num_microbatches_calculator.py`), DeepSpeed v0.19.5
(`deepspeed/runtime/config.py`, `deepspeed/runtime/zero/config.py` and the ZeRO optimizers'
checks in `stage_1_and_2.py` and `stage3.py`) and transformers
v4.57.1 (`integrations/deepspeed.py`); each rule's source names the lines.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.model import ERROR, WARNING
from trainops.policy import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, env_of, gpu_count, is_int, mapping

from . import commandline, common, launch
from .launchers import commandline_at

MEGATRON_TAG = (
    "https://github.com/NVIDIA/Megatron-LM/blob/5be9626709af2722333bf54797c954c09edeada3/"
)
MEGATRON_ARGS = MEGATRON_TAG + "megatron/training/arguments.py"
TRANSFORMER_CONFIG = MEGATRON_TAG + "megatron/core/transformer/transformer_config.py"
DEEPSPEED_TAG = "https://github.com/deepspeedai/DeepSpeed/blob/v0.19.5/"
DEEPSPEED_CONFIG = DEEPSPEED_TAG + "deepspeed/runtime/config.py"
HF_DEEPSPEED = (
    "https://github.com/huggingface/transformers/blob/v4.57.1/"
    "src/transformers/integrations/deepspeed.py"
)

# A Megatron-LM training script: pretrain_gpt.py and its siblings (pretrain_bert, _t5,
# _mamba, _vlm ...), whose arguments validate_args checks.
_MEGATRON_SCRIPT = re.compile(r"(^|/)pretrain_[a-z0-9_]+\.py$")
# Flags only Megatron's parser has: a pretrain_*.py without any is someone else's script.
_MEGATRON_FLAGS = (
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-attention-heads",
    "--num-layers",
    "--micro-batch-size",
)
_INT_FLAGS = {
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
    "micro": "--micro-batch-size",
    "global": "--global-batch-size",
    "heads": "--num-attention-heads",
    "groups": "--num-query-groups",
    "hidden": "--hidden-size",
    "kv": "--kv-channels",
    "layers": "--num-layers",
    "vpp_layers": "--num-layers-per-virtual-pipeline-stage",
    "vpp_stages": "--num-virtual-stages-per-pipeline-rank",
    "experts": "--num-experts",
    "seq": "--seq-length",
    "max_pos": "--max-position-embeddings",
}
# Arguments validate_args refuses (or exits on) since they were replaced.
_REMOVED = {
    "--batch-size": "--micro-batch-size",
    "--warmup": "--lr-warmup-fraction (or --lr-warmup-iters)",
    "--model-parallel-size": "--tensor-model-parallel-size",
    "--checkpoint-activations": "--recompute-activations or --recompute-granularity",
}
# GPUs before Blackwell (compute capability < 10), as GPU feature discovery names them.
_PRE_BLACKWELL = re.compile(
    r"(A100|A800|A10|A30|A40|H100|H800|H200|H20|GH200|L40|L4|V100|T4)", re.I
)
DEEPSPEED_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed_config_file")


@dataclass(frozen=True)
class Megatron:
    """What a container's Megatron-LM command line says."""

    index: int
    container: dict[str, Any]
    words: list[str]
    ints: dict[str, int]
    world: int | None  # ranks the launcher starts (None: not known offline)
    world_from: str

    def size(self, key: str, default: int = 1) -> int:
        return self.ints.get(key, default)

    def has(self, name: str) -> bool:
        return commandline.has_flag(self.words, name)


def _literal(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _megatron_words(words: list[str]) -> list[str] | None:
    for index, word in enumerate(words):
        if _MEGATRON_SCRIPT.search(word):
            return words[index + 1 :]
    return None


def _world(pod: PodTemplate, ctx: Context, container: dict[str, Any], words: list[str]):
    """(ranks, how that was counted) of the launcher in front of the script, when known."""
    if commandline.runs_torchrun(container):
        group = launch.group(pod, ctx)
        if group.nodes is None or group.low is not None:
            return None, ""
        value, _ = commandline.flag(words, *launch.NPROC)
        if value is None and pod.doc.kind == "PyTorchJob":
            value = str(mapping(pod.doc.obj.get("spec")).get("nprocPerNode", ""))
        per_node = _literal(value)
        if value in ("gpu", "auto") and gpu_count(container):
            per_node = gpu_count(container)
        if per_node is None:
            return None, ""
        return group.nodes * per_node, f"{group.nodes} nodes x {per_node} processes"
    for name in ("mpirun", "mpiexec"):
        if any(commandline.program(w) == name for w in words):
            ranks = _literal(commandline.flag(words, "-np", "-n", "--np")[0])
            return (ranks, f"mpirun -np {ranks}") if ranks else (None, "")
    return None, ""


def _megatron(pod: PodTemplate, ctx: Context) -> list[Megatron]:
    def compute() -> list[Megatron]:
        found = []
        for index, container in enumerate(pod.containers):
            words = commandline.words(container)
            args = _megatron_words(words)
            if args is None or not commandline.has_flag(args, *_MEGATRON_FLAGS):
                continue
            ints = {}
            for key, name in _INT_FLAGS.items():
                value = _literal(commandline.flag(args, name)[0])
                if value is not None:
                    ints[key] = value
            world, how = _world(pod, ctx, container, words)
            found.append(Megatron(index, container, args, ints, world, how))
        return found

    return pod.memo("megatron", compute)


def _megatron_rule(**fields: Any):
    return pod_rule(applies=common.trains, **fields)


@_megatron_rule(
    id="megatron-parallel-sizes",
    severity=ERROR,
    source=(
        MEGATRON_ARGS + "#L420-L432",
        MEGATRON_TAG + "megatron/core/parallel_state.py#L870-L884",
        MEGATRON_ARGS + "#L1600-L1603",
    ),
    title="Megatron's parallel sizes divide the ranks the job starts",
    why="Megatron-LM's validate_args asserts that the world size is divisible by "
    "tensor x pipeline x context parallel size, and parallel_state raises unless it is "
    "divisible by expert-tensor x expert x pipeline parallel size; with expert parallelism "
    "the number of experts must be a multiple of --expert-model-parallel-size (and set at "
    "all). Every rank stops at start-up with an AssertionError or RuntimeError.",
    fix="Choose --tensor/--pipeline/--context/--expert-model-parallel-size so that their "
    "products divide nodes x processes per node, and --num-experts a multiple of the "
    "expert parallel size.",
)
def megatron_parallel_sizes(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        tp, pp, cp, ep = run.size("tp"), run.size("pp"), run.size("cp"), run.size("ep")
        etp = run.size("etp", tp)
        if run.world is not None:
            model = tp * pp * cp
            if run.world % model:
                yield Violation(
                    f"world size {run.world} ({run.world_from}) is not divisible by "
                    f"TP x PP x CP = {tp} x {pp} x {cp} = {model}",
                    at,
                )
            expert = etp * ep * pp
            if ep > 1 and run.world % expert:
                yield Violation(
                    f"world size {run.world} is not divisible by expert TP x EP x PP = "
                    f"{etp} x {ep} x {pp} = {expert}",
                    at,
                )
        if ep > 1:
            experts = run.ints.get("experts")
            if experts is None:
                yield Violation(f"--expert-model-parallel-size {ep} without --num-experts", at)
            elif experts % ep:
                yield Violation(
                    f"--num-experts {experts} is not a multiple of "
                    f"--expert-model-parallel-size {ep}",
                    at,
                )


@_megatron_rule(
    id="megatron-batch-size",
    severity=ERROR,
    source=(
        MEGATRON_TAG + "megatron/core/num_microbatches_calculator.py#L380-L387",
        MEGATRON_ARGS + "#L672-L686",
    ),
    title="Megatron's global batch is a whole number of micro batches per data-parallel rank",
    why="The data-parallel size is world size / (TP x PP x CP); Megatron asserts that "
    "--global-batch-size is divisible by --micro-batch-size x data-parallel size, and that "
    "--micro-batch-size is given. Otherwise every rank stops at start-up.",
    fix="Make --global-batch-size a multiple of micro batch x (nodes x processes per node / "
    "(TP x PP x CP)), or leave it out to train with micro batch x data-parallel size.",
)
def megatron_batch_size(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        if not run.has("--micro-batch-size"):
            yield Violation("Megatron needs --micro-batch-size; it asserts it is set", at)
            continue
        micro, total = run.ints.get("micro"), run.ints.get("global")
        model = run.size("tp") * run.size("pp") * run.size("cp")
        if run.has("--step-batch-size-schedule") and run.has("--global-batch-size"):
            yield Violation(
                "--step-batch-size-schedule and --global-batch-size together: Megatron raises",
                at,
            )
            continue
        if run.has("--rampup-batch-size") or run.has("--step-batch-size-schedule"):
            continue  # the batch grows in steps the calculator checks itself
        if micro is None or total is None or run.world is None or run.world % model:
            continue
        data_parallel = run.world // model
        if total % (micro * data_parallel):
            yield Violation(
                f"--global-batch-size {total} is not divisible by micro batch {micro} x "
                f"data-parallel size {data_parallel} ({run.world} ranks / {model})",
                at,
            )


@_megatron_rule(
    id="megatron-attention-heads",
    severity=ERROR,
    source=(TRANSFORMER_CONFIG + "#L1323-L1344", MEGATRON_ARGS + "#L1291-L1293"),
    title="Megatron's attention heads and query groups split over tensor parallelism",
    why="TransformerConfig raises unless --num-attention-heads is a multiple of the tensor "
    "parallel size and --num-query-groups (grouped-query attention) is a multiple or a "
    "divisor of it; without --kv-channels, validate_args asserts --hidden-size is a "
    "multiple of --num-attention-heads. The model is never built.",
    fix="Pick a tensor parallel size that divides the head count (and the query groups), and "
    "a hidden size that is a multiple of the head count.",
)
def megatron_attention_heads(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        tp, heads = run.size("tp"), run.ints.get("heads")
        if heads is None:
            continue
        if heads % tp:
            yield Violation(
                f"--num-attention-heads {heads} is not a multiple of "
                f"--tensor-model-parallel-size {tp}",
                at,
            )
        groups = run.ints.get("groups")
        if groups and run.has("--group-query-attention") and groups % tp and tp % groups:
            yield Violation(
                f"--num-query-groups {groups} is neither a multiple nor a divisor of "
                f"--tensor-model-parallel-size {tp}",
                at,
            )
        hidden = run.ints.get("hidden")
        if hidden is not None and "kv" not in run.ints and hidden % heads:
            yield Violation(
                f"--hidden-size {hidden} is not a multiple of --num-attention-heads {heads}", at
            )


@_megatron_rule(
    id="megatron-pipeline-layers",
    severity=ERROR,
    source=MEGATRON_ARGS + "#L893-L978",
    title="Megatron's layers split over pipeline and virtual pipeline stages",
    why="validate_args asserts that --num-layers is divisible by the pipeline parallel size "
    "(and the layers per stage by --num-layers-per-virtual-pipeline-stage), that only one "
    "of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank "
    "and --pipeline-model-parallel-layout is given, and that the interleaved schedule runs "
    "with a pipeline parallel size above 1 (above 2 with --no-overlap-p2p-communication).",
    fix="Give --num-layers a multiple of the pipeline parallel size, one way of asking for "
    "virtual stages, and interleave only with enough pipeline stages.",
)
def megatron_pipeline_layers(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        pp, layers = run.size("pp"), run.ints.get("layers")
        ways = [
            name
            for name in (
                "--num-layers-per-virtual-pipeline-stage",
                "--num-virtual-stages-per-pipeline-rank",
                "--pipeline-model-parallel-layout",
            )
            if run.has(name)
        ]
        if len(ways) > 1:
            yield Violation(f"{' and '.join(ways)} together: Megatron allows one of them", at)
            continue
        uneven = run.has("--decoder-first-pipeline-num-layers") or run.has(
            "--decoder-last-pipeline-num-layers"
        )
        special = uneven or any(
            run.has(n)
            for n in (
                "--account-for-embedding-in-pipeline-split",
                "--account-for-loss-in-pipeline-split",
                "--hybrid-layer-pattern",
                "--hybrid-override-pattern",
                "--pipeline-model-parallel-layout",
            )
        )
        if layers is not None and not special and layers % pp:
            yield Violation(
                f"--num-layers {layers} is not divisible by --pipeline-model-parallel-size {pp}",
                at,
            )
            continue
        virtual = None
        per_stage = run.ints.get("vpp_layers")
        if per_stage and layers is not None and not special:
            if (layers // pp) % per_stage:
                yield Violation(
                    f"{layers // pp} layers per pipeline stage are not divisible by "
                    f"--num-layers-per-virtual-pipeline-stage {per_stage}",
                    at,
                )
                continue
            virtual = (layers // pp) // per_stage
        elif run.ints.get("vpp_stages"):
            virtual = run.ints["vpp_stages"]
        if virtual is not None and virtual > 1:
            least = 2 if run.has("--no-overlap-p2p-communication") else 1
            if pp <= least:
                yield Violation(
                    f"the interleaved schedule ({virtual} virtual stages) needs a pipeline "
                    f"parallel size above {least}, not {pp}",
                    at,
                )


@_megatron_rule(
    id="megatron-sequence-parallel",
    severity=WARNING,
    source=MEGATRON_ARGS + "#L1391-L1402",
    when={
        "error": "--tp-comm-overlap without sequence parallelism (given, with TP > 1): "
        "validate_args asserts",
        "warning": "--sequence-parallel with tensor parallel size 1: Megatron turns it off",
    },
    title="Megatron's sequence parallelism runs with tensor parallelism",
    why="With a tensor parallel size of 1 Megatron silently sets sequence_parallel to False "
    "(only a rank-0 warning says so), so a run sized for its activation savings runs without "
    "them; --tp-comm-overlap then fails its assertion that sequence parallelism is on.",
    fix="Use --sequence-parallel with --tensor-model-parallel-size > 1, and add "
    "--sequence-parallel wherever --tp-comm-overlap is given.",
)
def megatron_sequence_parallel(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        tp = run.size("tp")
        sequence = run.has("--sequence-parallel")
        if run.has("--tp-comm-overlap") and (not sequence or tp == 1):
            why = "tensor parallel size 1 turns it off" if sequence else "it is not given"
            yield Violation(
                f"--tp-comm-overlap needs sequence parallelism ({why}): Megatron asserts",
                at,
                severity=ERROR,
            )
        elif sequence and tp == 1:
            yield Violation(
                "--sequence-parallel with tensor parallel size 1: Megatron disables it", at
            )


def _script_sets(container: dict[str, Any]) -> bool:
    return any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in commandline.words(container))


def _pre_blackwell(pod: PodTemplate) -> bool:
    selector = mapping(pod.spec.get("nodeSelector"))
    product = str(selector.get("nvidia.com/gpu.product", ""))
    return bool(product) and bool(_PRE_BLACKWELL.search(product))


@_megatron_rule(
    id="megatron-cuda-device-max-connections",
    severity=WARNING,
    source=MEGATRON_ARGS + "#L1409-L1439",
    when={
        "error": "the pods select a GPU older than Blackwell (nodeSelector "
        "nvidia.com/gpu.product), where validate_args asserts, or FSDP2 with the variable "
        "at 1 (asserted on every GPU)",
        "warning": "the GPU model is not in the manifest: the assertion holds on Hopper and "
        "older GPUs only",
    },
    title="CUDA_DEVICE_MAX_CONNECTIONS is what Megatron's parallelism needs",
    why="On GPUs before Blackwell, Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 whenever "
    "tensor or context parallelism is on (so communication kernels are queued before the "
    "compute they overlap), unless FSDP is used; --use-torch-fsdp2 asserts the opposite "
    "(not 1). Every rank stops at start-up.",
    fix='Set env CUDA_DEVICE_MAX_CONNECTIONS: "1" on the training container for TP/CP > 1; '
    "leave it unset (or above 1) with FSDP.",
)
def megatron_cuda_connections(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        env = env_of(run.container)
        value = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
        if ("CUDA_DEVICE_MAX_CONNECTIONS" in env and value is None) or (
            "CUDA_DEVICE_MAX_CONNECTIONS" not in env
            and (run.container.get("envFrom") or _script_sets(run.container))
        ):
            continue  # set from a ConfigMap, a Secret or the script: not known here
        fsdp = run.has("--use-torch-fsdp2") or run.has("--use-megatron-fsdp")
        if run.has("--use-torch-fsdp2") and value == "1":
            yield Violation(
                "--use-torch-fsdp2 with CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron asserts it "
                "is not 1",
                at,
                severity=ERROR,
            )
            continue
        if fsdp or run.has("--overlap-moe-expert-parallel-comm"):
            continue
        if (run.size("tp") > 1 or run.size("cp") > 1) and value != "1":
            yield Violation(
                f"TP {run.size('tp')} / CP {run.size('cp')} without "
                "CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron asserts it on GPUs before Blackwell",
                at,
                severity=ERROR if _pre_blackwell(pod) else None,
            )


@_megatron_rule(
    id="megatron-optimizer-flags",
    severity=ERROR,
    source=MEGATRON_ARGS + "#L990-L1015",
    title="Megatron's overlap and FSDP flags come with the options they need",
    why="validate_args asserts that --overlap-param-gather comes with "
    "--use-distributed-optimizer (or Megatron FSDP) and --overlap-grad-reduce, and that "
    "--use-torch-fsdp2 is used without pipeline or expert parallelism, without "
    "--use-distributed-optimizer and without --fp16. Every rank stops at start-up.",
    fix="Add --use-distributed-optimizer --overlap-grad-reduce to --overlap-param-gather; "
    "with --use-torch-fsdp2 drop the distributed optimizer and pipeline/expert parallelism.",
)
def megatron_optimizer_flags(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        distributed = run.has("--use-distributed-optimizer")
        if run.has("--overlap-param-gather"):
            if not (distributed or run.has("--use-megatron-fsdp") or _dist_muon(run)):
                yield Violation("--overlap-param-gather without --use-distributed-optimizer", at)
            if not run.has("--overlap-grad-reduce"):
                yield Violation("--overlap-param-gather without --overlap-grad-reduce", at)
        if run.has("--use-torch-fsdp2"):
            clashes = [
                what
                for what, present in (
                    ("pipeline parallelism", run.size("pp") > 1),
                    ("expert parallelism", run.size("ep") > 1),
                    ("--use-distributed-optimizer", distributed),
                    ("--fp16", run.has("--fp16")),
                )
                if present
            ]
            if clashes:
                yield Violation(f"--use-torch-fsdp2 with {', '.join(clashes)}", at)


def _dist_muon(run: Megatron) -> bool:
    return commandline.flag(run.words, "--optimizer")[0] == "dist_muon"


@_megatron_rule(
    id="megatron-sequence-length",
    severity=ERROR,
    source=MEGATRON_ARGS + "#L1295-L1316",
    title="Megatron's sequence length fits its position embeddings and context parallelism",
    why="validate_args asserts that --max-position-embeddings is at least --seq-length and, "
    "with context parallelism, that --seq-length is a multiple of 2 x the context parallel "
    "size (each rank takes two chunks for load balance). Every rank stops at start-up.",
    fix="Raise --max-position-embeddings to the sequence length, and use a sequence length "
    "that is a multiple of 2 x --context-parallel-size.",
)
def megatron_sequence_length(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        seq, cp, max_pos = run.ints.get("seq"), run.size("cp"), run.ints.get("max_pos")
        if seq is None:
            continue
        if cp > 1 and seq % (2 * cp):
            yield Violation(
                f"--seq-length {seq} is not a multiple of 2 x --context-parallel-size {cp}", at
            )
        if max_pos is not None and max_pos < seq:
            yield Violation(f"--max-position-embeddings {max_pos} is below --seq-length {seq}", at)


@_megatron_rule(
    id="megatron-removed-args",
    severity=ERROR,
    source=(MEGATRON_ARGS + "#L572-L587", TRANSFORMER_CONFIG + "#L1313-L1317"),
    title="Megatron is given no argument it has replaced, and one precision",
    why="validate_args asserts that --batch-size, --warmup and --model-parallel-size are not "
    "given, and on --checkpoint-activations it prints a line and calls exit(): the pod ends "
    "with status 0 and the job reports success without training. TransformerConfig raises "
    "when --fp16 and --bf16 are both given.",
    fix="Use --micro-batch-size, --lr-warmup-fraction, --tensor-model-parallel-size and "
    "--recompute-activations; give one of --fp16 or --bf16.",
)
def megatron_removed_args(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        for old, new in _REMOVED.items():
            if run.has(old):
                effect = (
                    "Megatron exits with status 0 before training"
                    if old == "--checkpoint-activations"
                    else "Megatron asserts"
                )
                yield Violation(f"{old} is no longer valid ({effect}); use {new}", at)
        if run.has("--fp16") and run.has("--bf16"):
            yield Violation("--fp16 and --bf16 together: TransformerConfig raises", at)


_REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--max-position-embeddings")
# Schedule options of iteration-based and of sample-based training (0 means unset).
_BY_ITERATION = ("--train-iters", "--lr-decay-iters", "--lr-warmup-iters")
_BY_SAMPLE = ("--train-samples", "--lr-decay-samples", "--lr-warmup-samples")


def _given(words: list[str], name: str) -> bool:
    value, _ = commandline.flag(words, name)
    return value is not None and value not in ("0", "None")


def _float(words: list[str], name: str) -> float | None:
    value, _ = commandline.flag(words, name)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@_megatron_rule(
    id="megatron-training-args",
    severity=ERROR,
    source=(
        MEGATRON_ARGS + "#L1234-L1277",
        MEGATRON_ARGS + "#L1319-L1336",
        MEGATRON_ARGS + "#L1385-L1388",
        MEGATRON_ARGS + "#L90-L97",
        MEGATRON_ARGS + "#L397-L398",
        MEGATRON_TAG + "megatron/training/initialize.py#L436-L461",
    ),
    title="Megatron's model, schedule, checkpoint and precision options are complete and agree",
    why="validate_args asserts that --num-layers, --hidden-size, --num-attention-heads and "
    "--max-position-embeddings are given (unless taken from a checkpoint or YAML config), "
    "that a run is scheduled by iterations or by samples (not --train-iters with "
    "--train-samples or --lr-decay-samples), that --save comes with a positive "
    "--save-interval (and a "
    "--save-retain-interval that is a multiple of it), that --min-lr is not above --lr, "
    "that --fp16-lm-cross-entropy runs with --fp16 and --fp32-residual-connection with "
    "--fp16 or --bf16, that selective recomputation takes no --recompute-method, that "
    "--use-checkpoint-args comes with --load or --pretrained-checkpoint (and not with "
    "--non-persistent-ckpt-type local), that --non-persistent-ckpt-type is global or local, "
    "and (initialize.py) that --seed is a positive integer. Every rank stops at start-up.",
    fix="Add --save-interval N to --save, keep --min-lr at or below --lr, and drop the "
    "options the chosen precision or recomputation does not take.",
)
def megatron_training_args(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        words = run.words
        from_elsewhere = any(
            run.has(n) for n in ("--use-checkpoint-args", "--yaml-cfg", "--hybrid-layer-pattern")
        )
        missing = [n for n in _REQUIRED if not run.has(n)]
        if (
            missing
            and not from_elsewhere
            and not (missing == ["--num-layers"] and run.has("--encoder-num-layers"))
        ):
            yield Violation(f"{', '.join(missing)} not given: Megatron asserts they are set", at)
        iterations = [n for n in _BY_ITERATION if _given(words, n)]
        samples = [n for n in _BY_SAMPLE if _given(words, n)]
        by_iteration, by_sample = _given(words, "--train-iters"), _given(words, "--train-samples")
        if (by_iteration and samples) or (by_sample and iterations):
            yield Violation(
                f"{', '.join(iterations)} with {', '.join(samples)}: Megatron trains by "
                "iterations or by samples, not both",
                at,
            )
        if run.has("--save"):
            interval, _ = commandline.flag(words, "--save-interval", "--persistent-save-interval")
            retain = _literal(commandline.flag(words, "--save-retain-interval")[0])
            if interval is None:
                yield Violation("--save without --save-interval: Megatron asserts it is set", at)
            elif interval.isdigit() and int(interval) == 0:
                yield Violation("--save-interval 0: Megatron asserts it is positive", at)
            elif interval.isdigit() and retain is not None and retain % int(interval):
                yield Violation(
                    f"--save-retain-interval {retain} is not a multiple of --save-interval "
                    f"{interval}",
                    at,
                )
        lr, min_lr = _float(words, "--lr"), _float(words, "--min-lr")
        if lr is not None and min_lr is not None and min_lr > lr:
            yield Violation(f"--min-lr {min_lr:g} is above --lr {lr:g}", at)
        if run.has("--fp16-lm-cross-entropy") and not run.has("--fp16"):
            yield Violation("--fp16-lm-cross-entropy without --fp16", at)
        if run.has("--fp32-residual-connection") and not (run.has("--fp16") or run.has("--bf16")):
            yield Violation("--fp32-residual-connection without --fp16 or --bf16", at)
        granularity, _ = commandline.flag(words, "--recompute-granularity")
        selective = granularity == "selective" or run.has("--recompute-activations")
        if selective and run.has("--recompute-method"):
            yield Violation("selective recomputation with --recompute-method", at)
        yield from _checkpoint_and_seed(run, at)


def _signed(value: str | None) -> int | None:
    text = value[1:] if value is not None and value.startswith("-") else value
    return int(value) if value is not None and text and text.isdigit() else None


def _checkpoint_and_seed(run: Megatron, at: tuple) -> Iterator[Violation]:
    words = run.words
    kind, _ = commandline.flag(words, "--non-persistent-ckpt-type")
    if run.has("--use-checkpoint-args"):
        if not (run.has("--load") or run.has("--pretrained-checkpoint")):
            yield Violation(
                "--use-checkpoint-args without --load or --pretrained-checkpoint: Megatron "
                "asserts one is given",
                at,
            )
        if kind == "local":
            yield Violation(
                "--use-checkpoint-args with --non-persistent-ckpt-type local: Megatron asserts",
                at,
            )
    if kind == "in_memory":
        yield Violation(
            "--non-persistent-ckpt-type in_memory: validate_args asserts global or local", at
        )
    seed = _signed(commandline.flag(words, "--seed")[0])
    if seed is not None and seed <= 0:
        yield Violation(f"--seed {seed}: Megatron raises that the seed must be positive", at)


MODEL_PARALLEL_CONFIG = MEGATRON_TAG + "megatron/core/model_parallel_config.py"
_VIRTUAL_PIPELINE = (
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--pipeline-model-parallel-layout",
    "--hybrid-layer-pattern",
    "--hybrid-override-pattern",
)


@_megatron_rule(
    id="megatron-model-parallel-config",
    severity=ERROR,
    source=(
        MODEL_PARALLEL_CONFIG + "#L545-L558",
        MODEL_PARALLEL_CONFIG + "#L560-L565",
        MODEL_PARALLEL_CONFIG + "#L570-L575",
        MEGATRON_ARGS + "#L964-L983",
        MEGATRON_TAG + "megatron/training/argument_utils.py#L307",
    ),
    when={
        "error": "--defer-embedding-wgrad-compute with pipeline parallel size 1, with "
        "--no-gradient-accumulation-fusion or with a negative --wgrad-deferral-limit; "
        "--overlap-p2p-communication-warmup-flush with --no-overlap-p2p-communication or "
        "without the interleaved schedule: ModelParallelConfig raises",
        "warning": "expert and tensor parallelism without --sequence-parallel: Megatron "
        "warns that it must be used",
    },
    title="Megatron's pipeline and wgrad options come with what ModelParallelConfig needs",
    why="The TransformerConfig built from the arguments runs ModelParallelConfig's checks: "
    "deferring the embedding wgrad compute needs pipeline parallelism, gradient "
    "accumulation fusion and a deferral limit >= 0, and overlapping p2p communication in "
    "warmup and flush needs overlap_p2p_comm without batch_p2p_comm (Megatron sets "
    "batch_p2p_comm = not overlap_p2p_comm, and validate_args turns overlap_p2p_comm off "
    "unless the interleaved schedule is used); each raises ValueError when the model is "
    "built. With expert and tensor parallelism it warns that sequence parallelism must be "
    "used.",
    fix="Use --defer-embedding-wgrad-compute only with --pipeline-model-parallel-size > 1 and "
    "gradient accumulation fusion; use --overlap-p2p-communication-warmup-flush only with "
    "virtual pipeline stages and without --no-overlap-p2p-communication; add "
    "--sequence-parallel to expert plus tensor parallelism.",
)
def megatron_model_parallel_config(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for run in _megatron(pod, ctx):
        at = commandline_at(pod, run.index, run.container)
        if any(run.has(n) for n in ("--use-checkpoint-args", "--yaml-cfg")):
            continue  # arguments also come from a checkpoint or a YAML file
        tp, pp, ep = run.size("tp"), run.size("pp"), run.size("ep")
        if run.has("--defer-embedding-wgrad-compute"):
            if pp == 1 and ("pp" in run.ints or not run.has("--pipeline-model-parallel-size")):
                yield Violation(
                    "--defer-embedding-wgrad-compute without pipeline parallelism: "
                    "ModelParallelConfig raises",
                    at,
                )
            if run.has("--no-gradient-accumulation-fusion"):
                yield Violation(
                    "--defer-embedding-wgrad-compute with --no-gradient-accumulation-fusion: "
                    "ModelParallelConfig raises",
                    at,
                )
            limit = _signed(commandline.flag(run.words, "--wgrad-deferral-limit")[0])
            if limit is not None and limit < 0:
                yield Violation(
                    f"--wgrad-deferral-limit {limit} with --defer-embedding-wgrad-compute: "
                    "ModelParallelConfig raises (>= 0)",
                    at,
                )
        if run.has("--overlap-p2p-communication-warmup-flush"):
            if run.has("--no-overlap-p2p-communication"):
                yield Violation(
                    "--overlap-p2p-communication-warmup-flush with "
                    "--no-overlap-p2p-communication: ModelParallelConfig raises",
                    at,
                )
            elif not any(run.has(n) for n in _VIRTUAL_PIPELINE):
                yield Violation(
                    "--overlap-p2p-communication-warmup-flush without virtual pipeline "
                    "stages: Megatron turns overlap_p2p_comm off and ModelParallelConfig raises",
                    at,
                )
        known = all(k in run.ints or not run.has(_INT_FLAGS[k]) for k in ("tp", "ep"))
        if known and ep > 1 and tp > 1 and not run.has("--sequence-parallel"):
            yield Violation(
                f"expert parallel {ep} with tensor parallel {tp} without --sequence-parallel: "
                "Megatron warns that sequence parallelism must be used",
                at,
                severity=WARNING,
            )


# -- DeepSpeed configs in ConfigMaps ---------------------------------------------------------


@dataclass(frozen=True)
class DeepSpeedConfig:
    index: int
    container: dict[str, Any]
    words: list[str]
    config: dict[str, Any]
    where: str  # the ConfigMap and key
    hf_trainer: bool  # given with the Trainer's --deepspeed flag
    problem: str | None = None  # the file is missing or unreadable (deepspeed-config-file)


def _config_path(words: list[str]) -> tuple[str | None, bool]:
    """The config file a command names, and whether the Hugging Face Trainer reads it."""
    value, _ = commandline.flag(words, *DEEPSPEED_CONFIG_FLAGS)
    if value is not None:
        return value, False
    value, _ = commandline.flag(words, "--deepspeed")
    if value is not None and value.endswith(".json"):
        return value, True
    return None, False


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise _DuplicateKeys(", ".join(twice))
    return dict(pairs)


class _DuplicateKeys(ValueError):
    """A JSON object that names a key twice (DeepSpeed refuses it)."""


def _deepspeed_configs(pod: PodTemplate, ctx: Context) -> list[DeepSpeedConfig]:
    def compute() -> list[DeepSpeedConfig]:
        found = []
        for index, container in enumerate(pod.containers):
            words = commandline.words(container)
            path, hf = _config_path(words)
            if path is None or "$" in path:
                continue
            file = common.configmap_file(pod, ctx, container, path)
            if file is None:
                continue
            text, where = file
            problem, config = None, {}
            if text is None:
                problem = f"{path} is not in {where}: the container has no such file"
            else:
                try:
                    config = json.loads(text, object_pairs_hook=_unique_keys)
                except _DuplicateKeys as keys:
                    if hf or commandline.has_flag(words, "--deepspeed_config_file"):
                        continue  # read into a dict by transformers/accelerate: last one wins
                    problem = f"{where} names {keys} twice: DeepSpeed refuses duplicate keys"
                except ValueError:
                    continue  # hjson, which DeepSpeed also reads: not parsed here
            if isinstance(config, dict):
                found.append(DeepSpeedConfig(index, container, words, config, where, hf, problem))
        return found

    return pod.memo("deepspeed-configs", compute)


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ranks(pod: PodTemplate, ctx: Context, found: DeepSpeedConfig) -> int | None:
    world, _ = _world(pod, ctx, found.container, found.words)
    return world


@pod_rule(
    id="deepspeed-batch-size",
    severity=ERROR,
    source=(DEEPSPEED_CONFIG + "#L912-L978", HF_DEEPSPEED),
    title="A DeepSpeed config's batch sizes agree with each other and the world size",
    why="DeepSpeed asserts each batch value it is given is above 0, derives the missing "
    "one of train_batch_size, train_micro_batch_size_per_gpu and "
    "gradient_accumulation_steps and then asserts "
    "train_batch_size == micro batch x accumulation steps x data-parallel world size; it "
    "stops at deepspeed.initialize on every rank. Under the Hugging Face Trainer "
    '(--deepspeed ds.json) a value that is not "auto" must equal the Trainer\'s own '
    "(--per_device_train_batch_size, default 8; --gradient_accumulation_steps, default 1), "
    "or the Trainer raises listing the mismatches.",
    fix='Give two of the three and let DeepSpeed derive the third, write "auto" under the '
    "Trainer, or make train_batch_size = micro x accumulation x GPUs of the job.",
    applies=common.trains,
)
def deepspeed_batch_size(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for found in _deepspeed_configs(pod, ctx):
        if found.problem:
            continue
        at = commandline_at(pod, found.index, found.container)
        config = found.config
        total = _number(config.get("train_batch_size"))
        micro = _number(config.get("train_micro_batch_size_per_gpu"))
        steps = _number(config.get("gradient_accumulation_steps"))
        for key, value in (
            ("train_batch_size", total),
            ("train_micro_batch_size_per_gpu", micro),
            ("gradient_accumulation_steps", steps),
        ):
            if value is not None and value <= 0:
                yield Violation(f"{found.where}: {key} {value}: DeepSpeed asserts it is > 0", at)
        if found.hf_trainer:
            yield from _hf_mismatch(found, micro, steps, at)
            continue
        model_parallel = any(
            (_literal(commandline.flag(found.words, name)[0]) or 1) > 1
            for name in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size")
        )
        if total is None or micro is None or steps is None or min(total, micro, steps) <= 0:
            continue
        if total % (micro * steps):
            yield Violation(
                f"{found.where}: train_batch_size {total} is not a multiple of micro batch "
                f"{micro} x accumulation steps {steps}",
                at,
            )
            continue
        world = _ranks(pod, ctx, found)
        if world and not model_parallel and total != micro * steps * world:
            yield Violation(
                f"{found.where}: train_batch_size {total} != {micro} x {steps} x {world} ranks",
                at,
            )


def _hf_mismatch(found: DeepSpeedConfig, micro: int | None, steps: int | None, at: tuple):
    for ds_key, value, flag, default in (
        ("train_micro_batch_size_per_gpu", micro, "--per_device_train_batch_size", 8),
        ("gradient_accumulation_steps", steps, "--gradient_accumulation_steps", 1),
    ):
        if value is None:
            continue
        given, _ = commandline.flag(found.words, flag, flag.replace("_", "-"))
        if given is not None and not given.isdigit():
            continue
        trainer = int(given) if given is not None else default
        if value != trainer:
            yield Violation(
                f"{found.where}: {ds_key} {value} but the Trainer's {flag} is {trainer}: the "
                'Trainer raises on the mismatch (write "auto")',
                at,
            )


# The keys DeepSpeed v0.19.5's ZeRO config models accept (their fields and aliases); the
# models forbid any other (config_utils.py DeepSpeedConfigModel: extra="forbid").
ZERO_KEYS = frozenset(
    "stage contiguous_gradients reduce_scatter reduce_bucket_size "
    "use_multi_rank_bucket_allreduce allgather_partitions allgather_bucket_size overlap_comm "
    "load_from_fp32_weights elastic_checkpoint offload_param offload_optimizer zenflow "
    "sub_group_size cpu_offload_param cpu_offload_use_pin_memory cpu_offload "
    "prefetch_bucket_size stage3_prefetch_bucket_size param_persistence_threshold "
    "stage3_param_persistence_threshold model_persistence_threshold "
    "stage3_model_persistence_threshold max_live_parameters stage3_max_live_parameters "
    "max_reuse_distance stage3_max_reuse_distance gather_16bit_weights_on_model_save "
    "stage3_gather_16bit_weights_on_model_save module_granularity_threshold "
    "stage3_module_granularity_threshold use_all_reduce_for_fetch_params "
    "stage3_use_all_reduce_for_fetch_params allgather_sequential stage3_allgather_sequential "
    "stage3_gather_fp16_weights_on_model_save ignore_unused_parameters legacy_stage1 "
    "round_robin_gradients zero_hpz_partition_size zero_quantized_weights "
    "zero_quantized_nontrainable_weights zero_quantized_gradients zeropp_loco_param "
    "mics_shard_size mics_hierarchical_params_gather memory_efficient_linear "
    "pipeline_loading_checkpoint override_module_apply log_trace_cache_warnings "
    "enable_sanity_checks save_muon_momentum_buffer_in_memory leaf_module".split()
)
OFFLOAD_KEYS = {
    "offload_param": frozenset(
        "device nvme_path buffer_count buffer_size max_in_cpu pin_memory".split()
    ),
    "offload_optimizer": frozenset(
        "device nvme_path buffer_count pin_memory pipeline_read pipeline_write fast_init ratio "
        "super_offload cpuadam_cores_perc".split()
    ),
}
OFFLOAD_DEVICES = ("none", "cpu", "nvme")  # offload_config.py OffloadDeviceEnum


def _unknown_keys(section: dict[str, Any], known: frozenset[str], where: str) -> Iterator[str]:
    for key in sorted(set(section) - known):
        near = difflib.get_close_matches(key, known, n=1)
        yield f"{where}.{key} is not a DeepSpeed setting" + (f" (meant {near[0]}?)" if near else "")


def _zero_problems(zero: dict[str, Any], stage: Any) -> Iterator[str]:
    """What DeepSpeed's ZeRO config models refuse in `zero_optimization`."""
    yield from _unknown_keys(zero, ZERO_KEYS, "zero_optimization")
    for name, known in OFFLOAD_KEYS.items():
        offload = zero.get(name)
        if not isinstance(offload, dict):
            continue
        yield from _unknown_keys(offload, known, f"zero_optimization.{name}")
        device = offload.get("device")
        if isinstance(device, str) and device != "auto" and device not in OFFLOAD_DEVICES:
            yield (
                f"zero_optimization.{name}.device {device!r} is not one of "
                f"{', '.join(OFFLOAD_DEVICES)} (case matters)"
            )
    ratio = mapping(zero.get("offload_optimizer")).get("ratio")
    if isinstance(ratio, int | float) and ratio < 1.0 and _number(stage) in (0, 1, 2):
        yield (
            f"zero_optimization.offload_optimizer.ratio {ratio} in ZeRO stage {stage}: partial "
            "offloading is only supported in stage 3"
        )


COMMUNICATION_TYPES = ("fp32", "fp16", "bf16")  # config.py get_communication_data_type


def _gradient_problems(config: dict[str, Any], zero: dict[str, Any], stage: Any) -> Iterator[str]:
    """What DeepSpeed's config and its ZeRO-2/3 optimizers refuse about gradient reduction."""
    for key in ("communication_data_type", "seq_parallel_communication_data_type"):
        kind = config.get(key)
        if isinstance(kind, str) and kind != "auto" and kind.lower() not in COMMUNICATION_TYPES:
            yield f"{key} {kind!r} is not one of {', '.join(COMMUNICATION_TYPES)}"
    if _number(stage) not in (2, 3) or zero.get("reduce_scatter", True) is not True:
        return
    if config.get("prescale_gradients") is True:
        yield (
            f"prescale_gradients true in ZeRO stage {stage} with reduce_scatter: DeepSpeed "
            "asserts pre-scaling is not supported there"
        )
    factor = config.get("gradient_predivide_factor")
    if isinstance(factor, int | float) and not isinstance(factor, bool) and factor != 1.0:
        yield (
            f"gradient_predivide_factor {factor} in ZeRO stage {stage} with reduce_scatter: "
            "DeepSpeed asserts it is 1.0"
        )


TAG_VALIDATION_MODES = ("WARN", "IGNORE", "FAIL")  # runtime/constants.py, upper-cased
WRITER_TYPES = ("MOCK", "PYTHON", "FAST")  # model_checkpointing/constants.py


def _runtime_problems(config: dict[str, Any]) -> Iterator[str]:
    """What DeepSpeed's fp16, elasticity and checkpoint settings refuse at initialize."""
    fp16 = mapping(config.get("fp16"))
    scale = fp16.get("loss_scale")
    if scale is not None and scale != "auto":  # "auto": the HF Trainer fills it in
        try:
            number = None if isinstance(scale, bool) else float(scale)
        except (TypeError, ValueError):
            number = None
        if number is None or not math.isfinite(number) or number < 0:
            yield f"fp16.loss_scale {scale!r} is not a finite number >= 0 (0: dynamic scaling)"
    elastic = mapping(config.get("elasticity"))
    if elastic.get("enabled") is True:
        low, high = elastic.get("min_gpus", 1), elastic.get("max_gpus", 10000)
        if is_int(low) and is_int(high) and (low < 1 or high < 1 or high < low):
            yield f"elasticity min_gpus {low} and max_gpus {high}: both >= 1, min <= max"
    checkpoint = mapping(config.get("checkpoint"))
    mode = checkpoint.get("tag_validation")
    if isinstance(mode, str) and mode.upper() not in TAG_VALIDATION_MODES:
        yield f"checkpoint.tag_validation {mode!r} is not one of Warn, Ignore, Fail"
    writer = checkpoint.get("writer")
    kind = mapping(writer).get("type")
    if isinstance(kind, str) and kind.upper() not in WRITER_TYPES:
        yield f"checkpoint.writer.type {kind!r} is not one of mock, python, fast"


@pod_rule(
    id="deepspeed-config-values",
    severity=ERROR,
    source=(
        DEEPSPEED_CONFIG + "#L812-L815",
        DEEPSPEED_TAG + "deepspeed/runtime/zero/config.py#L81-L100",
        DEEPSPEED_TAG + "deepspeed/runtime/zero/config.py#L155-L168",
        DEEPSPEED_TAG + "deepspeed/runtime/zero/config.py#L388-L393",
        DEEPSPEED_TAG + "deepspeed/runtime/zero/offload_config.py#L14-L18",
        DEEPSPEED_TAG + "deepspeed/runtime/config_utils.py#L106-L113",
        DEEPSPEED_TAG + "deepspeed/runtime/precision_config.py#L120-L133",
        DEEPSPEED_TAG + "deepspeed/elasticity/config.py#L77-L85",
        DEEPSPEED_CONFIG + "#L630-L638",
        DEEPSPEED_TAG + "deepspeed/runtime/model_checkpointing/config.py#L22-L56",
        DEEPSPEED_CONFIG + "#L209-L223",
        DEEPSPEED_TAG + "deepspeed/runtime/engine.py#L1381-L1385",
        DEEPSPEED_TAG + "deepspeed/runtime/zero/stage_1_and_2.py#L304-L308",
        DEEPSPEED_TAG + "deepspeed/runtime/zero/stage3.py#L385-L389",
    ),
    when={
        "error": "a ZeRO stage other than 0-3, fp16 and bf16 both enabled, a key the ZeRO "
        "config models do not define, an offload device other than none/cpu/nvme, a "
        "partial optimizer offload (ratio below 1) before stage 3, an fp16.loss_scale that is "
        "not a number >= 0, enabled elasticity with min_gpus above max_gpus (or either below "
        "1), a checkpoint tag_validation other than Warn/Ignore/Fail or a checkpoint writer "
        "type other than mock/python/fast, a communication_data_type other than fp32/fp16/bf16, "
        "or prescale_gradients or a gradient_predivide_factor other than 1.0 in ZeRO "
        "stage 2 or 3 with reduce_scatter (the default): DeepSpeed refuses the config or "
        "its ZeRO optimizer asserts",
        "warning": "offload_param below stage 3: DeepSpeed ignores it",
    },
    title="A DeepSpeed config names a ZeRO stage, precision and offload it supports",
    why="DeepSpeed's config model accepts ZeRO stages 0 to 3 only, asserts that fp16 and bf16 "
    "are not both enabled, forbids keys its ZeRO and offload models do not define (a "
    "misspelt key is a validation error at deepspeed.initialize, not ignored), accepts the "
    "offload devices none, cpu and nvme in lower case, asserts that a partial optimizer "
    "offload (ratio below 1) runs in stage 3, refuses an fp16.loss_scale that is not a "
    "number, elastic bounds that cross, checkpoint modes and communication data types it "
    "does not know; its ZeRO-2 and ZeRO-3 optimizers assert, with reduce_scatter on (the "
    "default), that gradients are not pre-scaled and gradient_predivide_factor is 1.0; and "
    "it offloads "
    "parameters (offload_param) only "
    "in stage 3: in "
    "stages 1 and 2 the section is ignored and the parameters stay on the GPU the run was "
    "sized to free.",
    fix="Use zero_optimization.stage 0-3, enable one of fp16/bf16, and offload parameters "
    "only with stage 3 (offload_optimizer works from stage 1); under ZeRO 2/3 leave "
    "prescale_gradients false and gradient_predivide_factor 1.0.",
    applies=common.trains,
)
def deepspeed_config_values(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for found in _deepspeed_configs(pod, ctx):
        if found.problem:
            continue
        at = commandline_at(pod, found.index, found.container)
        zero = mapping(found.config.get("zero_optimization"))
        stage = zero.get("stage", 0)
        if _number(stage) is not None and stage not in (0, 1, 2, 3):
            yield Violation(f"{found.where}: zero_optimization.stage {stage} (0-3)", at)
        for problem in _zero_problems(zero, stage):
            yield Violation(f"{found.where}: {problem}", at)
        enabled = [
            key for key in ("fp16", "bf16") if mapping(found.config.get(key)).get("enabled") is True
        ]
        if len(enabled) == 2:
            yield Violation(f"{found.where}: fp16 and bf16 both enabled", at)
        for problem in _runtime_problems(found.config):
            yield Violation(f"{found.where}: {problem}", at)
        for problem in _gradient_problems(found.config, zero, stage):
            yield Violation(f"{found.where}: {problem}", at)
        offload = mapping(zero.get("offload_param"))
        if _number(stage) in (0, 1, 2) and offload.get("device") not in (None, "none"):
            yield Violation(
                f"{found.where}: offload_param to {offload['device']} in ZeRO stage {stage}: "
                "only stage 3 offloads parameters",
                at,
                severity=WARNING,
            )


@pod_rule(
    id="deepspeed-config-file",
    severity=ERROR,
    source=(
        DEEPSPEED_CONFIG + "#L682-L696",
        DEEPSPEED_TAG + "deepspeed/runtime/config_utils.py#L205-L212",
    ),
    title="The DeepSpeed config a command names is a file of its ConfigMap",
    why="DeepSpeedConfig opens the path it is given; when the ConfigMap mounted there has no "
    "such key (or its items leave the file out) the path does not exist, and DeepSpeed "
    "raises that it expected a path to an existing config. Reading the file itself "
    "(--deepspeed_config) it also refuses a key written twice "
    "(dict_raise_error_on_duplicate_keys). The ranks stop at "
    "deepspeed.initialize.",
    fix="Name the file after a key of the ConfigMap (or its items' path), and write each key once.",
    applies=common.trains,
)
def deepspeed_config_file(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for found in _deepspeed_configs(pod, ctx):
        if found.problem:
            yield Violation(found.problem, commandline_at(pod, found.index, found.container))
