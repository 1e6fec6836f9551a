"""Run `trainops doctor nccl` on every case of a blind set, for a judge to read.

    python tests/doctor/blind/run.py tests/doctor/blind/set-1 OUT [--root CHECKOUT]

Each case file holds a thread's header, a line `---`, then the lines it pasted; the log
(everything after `---`) goes to OUT/logs/CASE.log, the doctor's answer to OUT/out/CASE.txt
and its exit code to OUT/out/CASE.rc. `--root` runs another checkout's doctor (an older
commit, for the "before" figure). Judging stays with a person or a helper who has not read
the doctor's code: JUDGING.md in each set says how, and its verdicts are the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

TIMEOUT_S = 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", type=Path, help="a set directory (with cases/)")
    parser.add_argument("out", type=Path, help="where the logs and answers go")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[3])
    args = parser.parse_args()
    cases = sorted((args.set / "cases").glob("*.txt"))
    if not cases:
        parser.error(f"{args.set}: no cases/*.txt")
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    (args.out / "out").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(args.root.resolve() / "tools")}
    for case in cases:
        _, _, log = case.read_text(encoding="utf-8", errors="replace").partition("\n---\n")
        log_file = args.out / "logs" / f"{case.stem}.log"
        log_file.write_text(log)
        try:
            run = subprocess.run(
                [sys.executable, "-m", "trainops", "doctor", "nccl", str(log_file.resolve())],
                capture_output=True,
                text=True,
                env=env,
                cwd=args.root,
                timeout=TIMEOUT_S,
            )
            answer, code = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired:
            answer, code = f"timeout after {TIMEOUT_S} s\n", 124
        (args.out / "out" / f"{case.stem}.txt").write_text(answer)
        (args.out / "out" / f"{case.stem}.rc").write_text(f"{code}\n")
        print(f"{case.stem} rc={code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
