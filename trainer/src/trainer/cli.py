"""Command line of `python -m trainer`: flags, environment and config file into a `TrainConfig`.

Flags win over environment variables, which win over the config file (`--config`,
see `trainer.configfile`); the job templates set the environment (ENVIRONMENT below)
and runs add flags or a file.
"""

from __future__ import annotations

import argparse
import os
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainer import config as cfg
from trainer import configfile, plugins
from trainer.errors import EXIT_CODE_DOCS, ConfigError, ExitCode, TrainerError, report_error
from trainer.ownership import check_directory

# Flags whose default the job templates set through the environment, by dest.
ENVIRONMENT = {
    "checkpoint_dir": "TRAINER_CHECKPOINT_DIR",
    "job_name": "TRAINER_JOB_NAME",
    "job_uid": "TRAINER_JOB_UID",
    "metrics_port": "TRAINER_METRICS_PORT",
    "expect_transport": "TRAINER_EXPECT_TRANSPORT",
    "expect_gdr": "TRAINER_EXPECT_GDR",
}

EPILOG = "exit codes:\n" + "\n".join(
    f"  {int(code):>3}  {text}" for code, text in EXIT_CODE_DOCS.items()
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(f"{message} (see --help)")


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def parse_fault(text: str) -> cfg.Fault:
    """`KIND@STEP[:rank=R]`, for example `sigkill@12:rank=1`."""
    spec, _, option = text.partition(":")
    kind, at, step_text = spec.partition("@")
    if not at or kind not in cfg.FAULT_KINDS:
        raise argparse.ArgumentTypeError(
            f"bad fault {text!r}: expected KIND@STEP[:rank=R] with KIND one of "
            + ", ".join(cfg.FAULT_KINDS)
        )
    step = _positive_int(step_text)
    rank = None
    if option:
        key, eq, value = option.partition("=")
        if key != "rank" or not eq:
            raise argparse.ArgumentTypeError(f"bad fault option {option!r}: expected rank=R")
        rank = _non_negative_int(value)
    return cfg.Fault(kind, step, rank)


def env_choice(env: Mapping[str, str], name: str, choices: Sequence[str]) -> str | None:
    value = env.get(name, "").strip().lower()
    if not value or value == "none":
        return None
    if value not in choices:
        raise ConfigError(f"environment variable {name}={value!r}: expected one of {choices}")
    return value


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r}: expected an integer") from None


def env_flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigError(f"environment variable {name}={value!r}: expected 1/0 or true/false")


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    checkpoint_dir = env.get(ENVIRONMENT["checkpoint_dir"]) or None
    parser = _Parser(
        prog="python -m trainer",
        description="Train a model with DDP or FSDP2: resumable, "
        "preemption-safe, with metrics and an NCCL transport check. Run it under "
        "torchrun (or trainer-launch, which adds exit codes) or mpirun.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_argument_group("config file")
    source.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML file of flag values (keys are the long flags: max-steps = 100); "
        "the environment and the command line win over it",
    )
    source.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as a file --config reads, and exit",
    )

    run = parser.add_argument_group("run")
    run.add_argument(
        "--max-steps",
        type=_positive_int,
        help="optimizer steps of the whole job (not of this launch); required",
    )
    run.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        help="seed of the model init and of the data order (default 0)",
    )
    run.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: the GPU named by LOCAL_RANK when CUDA is available",
    )
    run.add_argument(
        "--collective-timeout",
        type=_positive_float,
        default=1800.0,
        metavar="SECONDS",
        help="timeout of one collective (default 1800)",
    )
    run.add_argument(
        "--record-samples",
        type=Path,
        metavar="DIR",
        help="append the sample ids of every step to DIR/samples.rank<R>.jsonl",
    )

    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset",
        type=plugins.parse_choice("dataset", cfg.DATASETS),
        default="synthetic",
        metavar="NAME|MODULE:ATTR",
        help="synthetic (generated from the seed), npz (arrays x and y), tokens "
        "(token shards, memory-mapped: a .npy of uint16 or uint32, a raw uint16 file, "
        "or a directory of them) or a plug-in's import path",
    )
    data.add_argument("--data-path", type=Path, help="file or directory of the dataset")
    data.add_argument(
        "--batch-size",
        type=_positive_int,
        default=16,
        help="samples per rank per forward pass, a micro-batch (default 16)",
    )
    data.add_argument(
        "--seq-len",
        type=_positive_int,
        default=32,
        help="tokens per sample for the gpt model (default 32)",
    )
    data.add_argument(
        "--num-samples",
        type=_positive_int,
        default=4096,
        help="size of the synthetic dataset (default 4096)",
    )
    data.add_argument(
        "--vocab-size",
        type=_positive_int,
        help="token datasets: vocabulary size (default: the tokenizer's, else largest token + 1)",
    )
    data.add_argument(
        "--tokenizer",
        type=Path,
        metavar="PATH",
        help="tokenizer.json (or a directory holding one) of the token data, from a local "
        "path or the dataset claim: sets the vocabulary and checks the data against it",
    )
    data.add_argument(
        "--prefetch",
        type=_non_negative_int,
        default=2,
        metavar="BATCHES",
        help="batches assembled ahead on a background thread (default 2; 0: on the "
        "training thread)",
    )

    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        type=plugins.parse_choice("model", cfg.MODELS),
        default="mlp",
        metavar="NAME|MODULE:ATTR",
        help=f"{', '.join(cfg.MODELS)} or a plug-in's import path (default mlp)",
    )
    model.add_argument("--width", type=_positive_int, help="hidden size (default per model)")
    model.add_argument(
        "--depth", type=_positive_int, default=2, help="gpt/llama blocks (default 2)"
    )
    model.add_argument(
        "--heads", type=_positive_int, default=4, help="gpt/llama attention heads (default 4)"
    )
    model.add_argument(
        "--kv-heads",
        type=_positive_int,
        help="llama key/value heads, dividing --heads (grouped-query attention; default --heads)",
    )
    model.add_argument(
        "--ffn-dim",
        type=_positive_int,
        help="llama SwiGLU hidden size (default 8/3 x width, rounded up to a multiple of 64)",
    )
    model.add_argument(
        "--rope-theta", type=_positive_float, default=10000.0, help="llama RoPE base (default 1e4)"
    )
    model.add_argument(
        "--norm-eps", type=_positive_float, default=1e-5, help="llama RMSNorm epsilon"
    )
    model.add_argument(
        "--weights",
        type=Path,
        metavar="PATH",
        help="initial weights, a .safetensors file or a directory of them (with "
        "model.safetensors.index.json when sharded), from a local path or the dataset "
        "claim; names and shapes are the model's (Hugging Face Llama checkpoints fit "
        "--model llama); a resume loads the checkpoint instead",
    )
    model.add_argument(
        "--loss",
        type=plugins.parse_choice("loss", cfg.LOSSES),
        default="cross-entropy",
        metavar="NAME|MODULE:ATTR",
        help="cross-entropy (default) or a plug-in's import path",
    )

    optim = parser.add_argument_group("optimizer")
    optim.add_argument(
        "--optimizer",
        type=plugins.parse_choice("optimizer", cfg.OPTIMIZERS),
        default="adamw",
        metavar="NAME|MODULE:ATTR",
        help="adamw (default) or a plug-in's import path",
    )
    optim.add_argument(
        "--lr", type=_positive_float, default=1e-3, help="peak learning rate (default 1e-3)"
    )
    optim.add_argument(
        "--lr-scaling",
        choices=cfg.LR_SCALING,
        default="none",
        help="scale the learning rate with the world size: linear, sqrt or none (default)",
    )
    optim.add_argument("--lr-schedule", choices=cfg.LR_SCHEDULES, default="cosine")
    optim.add_argument("--warmup-steps", type=_non_negative_int, default=0)
    optim.add_argument("--weight-decay", type=_non_negative_float, default=0.0)
    optim.add_argument(
        "--grad-clip",
        type=_non_negative_float,
        default=1.0,
        help="clip the gradient norm to this value; 0 disables",
    )

    # -- parallelism, precision and batch (issue 23) ----------------------------------
    parallel = parser.add_argument_group("parallelism and precision")
    parallel.add_argument(
        "--parallelism",
        choices=cfg.PARALLELISMS,
        default="ddp",
        help="ddp: a full replica per rank (default); fsdp: FSDP2, parameters, gradients "
        "and optimizer state sharded per block (HSDP across nodes)",
    )
    parallel.add_argument(
        "--precision",
        choices=cfg.PRECISIONS,
        default="fp32",
        help="bf16: compute in bfloat16 with fp32 parameters and gradient reduction (default fp32)",
    )
    parallel.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each block's activations in the backward pass: less memory, "
        "about one more forward pass of compute",
    )
    parallel.add_argument(
        "--global-batch",
        type=_positive_int,
        metavar="SAMPLES",
        help="samples per optimizer step, kept when the world size changes: each rank "
        "accumulates global-batch / (batch-size x world size) micro-batches "
        "(default: batch-size x world size, no accumulation)",
    )

    ckpt = parser.add_argument_group("checkpoints")
    ckpt.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=checkpoint_dir,
        help="shared directory for step-N checkpoints "
        "(env TRAINER_CHECKPOINT_DIR; unset: no checkpoints)",
    )
    ckpt.add_argument(
        "--checkpoint-interval",
        type=_positive_int,
        default=100,
        metavar="STEPS",
        help="steps between checkpoints (default 100)",
    )
    ckpt.add_argument(
        "--checkpoint-keep",
        type=_positive_int,
        default=3,
        metavar="K",
        help="complete checkpoints to keep (default 3)",
    )
    ckpt.add_argument(
        "--checkpoint-mode",
        choices=cfg.CHECKPOINT_MODES,
        default="async",
        help="async: write in the background, one save in flight (default)",
    )
    ckpt.add_argument(
        "--checkpoint-verify",
        choices=cfg.CHECKPOINT_VERIFY,
        default="crc32",
        help="check file sizes and CRC32 (default) or sizes only on resume",
    )
    ckpt.add_argument(
        "--no-resume",
        action="store_true",
        help="start from scratch: earlier checkpoints are set aside as step-N.discarded",
    )
    ckpt.add_argument(
        "--job-name",
        default=env.get(ENVIRONMENT["job_name"]) or None,
        help="name of this job, recorded in its checkpoints; a resume refuses checkpoints "
        "of another job (env TRAINER_JOB_NAME; the templates pass the operator's job name)",
    )
    ckpt.add_argument(
        "--job-uid",
        default=env.get(ENVIRONMENT["job_uid"]) or None,
        help="uid of this job, recorded with its name (env TRAINER_JOB_UID; the Trainer v2 "
        "templates pass the JobSet's uid; unset: the name alone identifies the job)",
    )
    ckpt.add_argument(
        "--adopt-checkpoints",
        action="store_true",
        help="resume from checkpoints another job wrote in --checkpoint-dir "
        "(a deliberate continuation, e.g. of a deleted job under a new name)",
    )
    ckpt.add_argument(
        "--checkpoint-lock-wait",
        type=_non_negative_float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for an earlier launch of this job to release the "
        "checkpoint directory (default 300; keep it below --collective-timeout)",
    )

    guard = parser.add_argument_group("failure handling")
    guard.add_argument(
        "--max-bad-steps",
        type=_positive_int,
        default=3,
        metavar="K",
        help="consecutive NaN/Inf steps before rolling back (default 3)",
    )
    guard.add_argument(
        "--max-rollbacks",
        type=_non_negative_int,
        default=2,
        help="rollbacks before exiting as diverged (default 2)",
    )
    guard.add_argument(
        "--watchdog-timeout",
        type=_non_negative_float,
        default=600.0,
        metavar="SECONDS",
        help="longest allowed step; 0 disables (default 600)",
    )
    guard.add_argument(
        "--inject-fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND@STEP[:rank=R]",
        help="chaos testing: sigkill, sigterm, nan, hang, exception, watchdog "
        "(fire the watchdog now) or nospace (the checkpoint of that step finds the volume "
        "full) at a step, once per job; slow (a straggler: every step from then on takes "
        "0.2 s longer); repeatable",
    )

    metrics = parser.add_argument_group("metrics")
    metrics.add_argument(
        "--metrics-port",
        type=_non_negative_int,
        default=env_int(env, ENVIRONMENT["metrics_port"], 0),
        help="Prometheus port on rank 0 (env TRAINER_METRICS_PORT; 0: off)",
    )
    metrics.add_argument(
        "--metrics-file", type=Path, help="also append rank 0's JSON metric lines to this file"
    )
    metrics.add_argument("--log-interval", type=_positive_int, default=10, metavar="STEPS")
    metrics.add_argument(
        "--peak-flops",
        type=_positive_float,
        help="peak FLOP/s of one device for MFU (default: from the GPU model)",
    )

    transport = parser.add_argument_group("NCCL transport check")
    transport.add_argument(
        "--expect-transport",
        choices=cfg.TRANSPORTS,
        default=env_choice(env, ENVIRONMENT["expect_transport"], cfg.TRANSPORTS),
        help="fail fast unless NCCL uses this network (env TRAINER_EXPECT_TRANSPORT)",
    )
    transport.add_argument(
        "--expect-gdr",
        action="store_true",
        default=env_flag(env, ENVIRONMENT["expect_gdr"]),
        help="fail fast unless inter-node traffic uses GPUDirect RDMA (env TRAINER_EXPECT_GDR)",
    )
    return parser


def parse_args(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> cfg.TrainConfig:
    return read_command_line(argv, env)[0]


def read_command_line(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[cfg.TrainConfig, bool]:
    """The run's config, and whether --print-config asked only to print it."""
    env = os.environ if env is None else env
    parser = build_parser(env)
    args = parser.parse_args(argv)
    if args.config is not None:
        env_set = [dest for dest, name in ENVIRONMENT.items() if env.get(name, "").strip()]
        parser.set_defaults(**configfile.defaults_from(args.config, parser, env_set))
        args = parser.parse_args(argv)
    if args.max_steps is None:
        raise ConfigError("--max-steps is required (a flag, or max-steps in --config)")
    builtin_data = not plugins.is_import_path(args.dataset)
    if builtin_data and args.dataset != "synthetic" and args.data_path is None:
        raise ConfigError(f"--dataset {args.dataset} needs --data-path")
    builtin_model = not plugins.is_import_path(args.model)
    if args.dataset == "tokens" and builtin_model and args.model not in cfg.LANGUAGE_MODELS:
        raise ConfigError(
            "--dataset tokens feeds a language model: use --model "
            + " or ".join(cfg.LANGUAGE_MODELS)
        )
    if args.dataset == "npz" and args.model in cfg.LANGUAGE_MODELS:
        raise ConfigError(
            f"--model {args.model} reads token data: use --dataset tokens or synthetic"
        )
    if args.expect_gdr and args.expect_transport == "socket":
        raise ConfigError("--expect-gdr needs --expect-transport ib (sockets have no GPUDirect)")
    if args.checkpoint_dir is not None:
        check_directory(args.checkpoint_dir, f"--checkpoint-dir {args.checkpoint_dir}")
    elif args.adopt_checkpoints:
        raise ConfigError("--adopt-checkpoints needs --checkpoint-dir")
    return cfg.TrainConfig(
        max_steps=args.max_steps,
        seed=args.seed,
        device=args.device,
        collective_timeout=args.collective_timeout,
        record_samples=args.record_samples,
        data=cfg.DataConfig(
            dataset=args.dataset,
            path=args.data_path,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            num_samples=args.num_samples,
            vocab_size=args.vocab_size,
            seed=args.seed,
            tokenizer=args.tokenizer,
            prefetch=args.prefetch,
        ),
        model=cfg.ModelConfig(
            args.model,
            args.width,
            args.depth,
            args.heads,
            kv_heads=args.kv_heads,
            ffn_dim=args.ffn_dim,
            rope_theta=args.rope_theta,
            norm_eps=args.norm_eps,
            weights=args.weights,
        ),
        loss=args.loss,
        optim=cfg.OptimConfig(
            name=args.optimizer,
            lr=args.lr,
            lr_scaling=args.lr_scaling,
            schedule=args.lr_schedule,
            warmup_steps=args.warmup_steps,
            weight_decay=args.weight_decay,
            grad_clip=args.grad_clip,
        ),
        parallel=cfg.ParallelConfig(
            parallelism=args.parallelism,
            precision=args.precision,
            activation_checkpointing=args.activation_checkpointing,
            global_batch=args.global_batch,
        ),
        checkpoint=cfg.CheckpointConfig(
            directory=args.checkpoint_dir,
            interval=args.checkpoint_interval,
            keep=args.checkpoint_keep,
            mode=args.checkpoint_mode,
            verify=args.checkpoint_verify,
            resume=not args.no_resume,
            job=cfg.JobIdentity(args.job_name or None, args.job_uid or None),
            adopt=args.adopt_checkpoints,
            lock_wait=args.checkpoint_lock_wait,
        ),
        guard=cfg.GuardConfig(args.max_bad_steps, args.max_rollbacks),
        watchdog=cfg.WatchdogConfig(args.watchdog_timeout),
        metrics=cfg.MetricsConfig(
            port=args.metrics_port,
            file=args.metrics_file,
            log_interval=args.log_interval,
            peak_flops=args.peak_flops,
        ),
        transport=cfg.TransportConfig(args.expect_transport, args.expect_gdr),
        faults=tuple(args.inject_fault),
        resolved=configfile.resolved(parser, args),
    ), args.print_config


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config, print_only = read_command_line(argv)
        if print_only:
            print(configfile.to_toml(config.resolved), end="")
            return int(ExitCode.OK)
        from trainer.train import run

        return int(run(config))
    except TrainerError as error:
        report_error(error)
        return int(error.code)
    except KeyboardInterrupt:
        return 130
    except Exception:
        traceback.print_exc()
        return int(ExitCode.FAILED)
