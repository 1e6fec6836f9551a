"""`python -m trainer.inspect DIR`: what a checkpoint directory holds, as JSON.

Reports the newest complete checkpoint (the one a resume would pick) with its
progress counters and a digest of the model parameters, and lists every checkpoint
by status. Needs no process group and no GPU; run it next to the volume.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer.config import CHECKPOINT_VERIFY


def describe(directory: Path, verify_mode: str = "crc32", with_params: bool = True) -> dict:
    from trainer.checkpoint import load_offline, params_sha256, scan

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
        "complete": [i.step for i in infos if i.status == "complete"],
        "partial": [i.step for i in infos if i.status == "partial"],
        "corrupt": [
            {"step": i.step, "path": i.path.name, "problem": i.problem}
            for i in infos
            if i.status == "corrupt"
        ],
    }
    for info in reversed([i for i in infos if i.status == "complete"]):
        try:
            state = load_offline(info.path)
        except Exception as error:
            report["complete"].remove(info.step)
            problem = f"load failed: {error}".splitlines()[0]
            report["corrupt"].append(
                {"step": info.step, "path": info.path.name, "problem": problem}
            )
            continue
        progress = state.get("progress", {})
        report["step"] = info.step
        for key in ("epoch", "consumed_samples", "world_size", "launches", "productive_seconds"):
            report[key] = progress.get(key)
        if with_params:
            report["params_sha256"] = params_sha256(state["model"])
        break
    report["corrupt"].sort(key=lambda entry: entry["step"])
    return report


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
    if not args.directory.is_dir():
        print(f"trainer.inspect: error: {args.directory}: no such directory", file=sys.stderr)
        return 2
    report = describe(args.directory, args.verify, not args.no_params)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
