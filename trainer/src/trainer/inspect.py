"""`python -m trainer.inspect DIR`: what a checkpoint directory holds, as JSON.

Reports the newest complete checkpoint (the one a resume would pick) with its
progress counters, the job that wrote it, the resolved config it was trained with
(`--print-config`'s keys) and a digest of the model parameters, and
lists every checkpoint by status. Needs no process group and no GPU; run it next to
the volume. It only reads: a checkpoint is read as a resume reads it (`safe_dcp`,
no code from the checkpoint runs), and nothing is renamed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer.config import CHECKPOINT_VERIFY
from trainer.errors import ConfigError
from trainer.ownership import check_directory

PROGRESS_KEYS = ("epoch", "consumed_samples", "world_size", "launches", "productive_seconds")


def describe(directory: Path, verify_mode: str = "crc32", with_params: bool = True) -> dict:
    from trainer.checkpoint import CHECKPOINT_ERRORS, describe_failure, scan

    infos = scan(directory, mode=verify_mode)
    report = {
        "directory": str(directory),
        "step": None,
        "epoch": None,
        "consumed_samples": None,
        "world_size": None,
        "launches": None,
        "productive_seconds": None,
        "params_sha256": None,
        "job": None,
        "config": None,
        "complete": [i.step for i in infos if i.status == "complete"],
        "partial": [i.step for i in infos if i.status == "partial"],
        "corrupt": [
            {"step": i.step, "path": i.path.name, "problem": i.problem}
            for i in infos
            if i.status == "corrupt"
        ],
        "discarded": [i.step for i in infos if i.status == "discarded"],
    }
    for info in reversed([i for i in infos if i.status == "complete"]):
        try:
            found = _summary(info.path, with_params)
        except CHECKPOINT_ERRORS as error:  # whatever a hostile checkpoint makes a load raise
            report["complete"].remove(info.step)
            problem = f"load failed: {describe_failure(error)}"
            report["corrupt"].append(
                {"step": info.step, "path": info.path.name, "problem": problem}
            )
            continue
        report.update(found, step=info.step)
        break
    report["corrupt"].sort(key=lambda entry: entry["step"])
    return report


def _summary(path: Path, with_params: bool) -> dict:
    from trainer.checkpoint import load_offline, params_sha256, read_manifest

    manifest = read_manifest(path)
    state = load_offline(path)
    progress = state.get("progress")
    if not isinstance(progress, dict):
        raise ValueError("the checkpoint has no progress counters")
    summary = {key: progress.get(key) for key in PROGRESS_KEYS}
    summary["job"] = manifest.get("job")
    summary["config"] = manifest.get("config")
    if with_params:
        summary["params_sha256"] = params_sha256(state["model"])
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.inspect",
        description="Describe a trainer checkpoint directory as JSON: the newest complete "
        "checkpoint (step, epoch, consumed_samples, world_size, params_sha256) and the "
        "complete, partial and corrupt ones.",
    )
    parser.add_argument("directory", type=Path, help="the --checkpoint-dir of a run")
    parser.add_argument(
        "--verify",
        choices=CHECKPOINT_VERIFY,
        default="crc32",
        help="check sizes and CRC32 (default) or sizes only",
    )
    parser.add_argument(
        "--no-params", action="store_true", help="skip loading the model to digest its parameters"
    )
    args = parser.parse_args(argv)
    try:
        check_directory(args.directory, str(args.directory))
        if not args.directory.exists():
            raise ConfigError(f"{args.directory}: no such directory")
    except ConfigError as error:
        print(f"trainer.inspect: error: {error}", file=sys.stderr)
        return 2
    report = describe(args.directory, args.verify, not args.no_params)
    print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
