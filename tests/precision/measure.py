"""The blind precision set: run `trainops validate` on each file alone, as a new user would.

    .venv/bin/python tests/precision/measure.py [--trainops PATH] [--json OUT]

Each file is validated on its own, from a directory outside any trainops project (so no
project config applies), with an empty cache. Prints the files refused (exit 2), crashes
and error findings; with a verdicts file (verdicts-after.tsv: id, verdict, reason, for
the rows of errors-after.tsv) it also counts the false errors per file. Measured, never
asserted: the set is kept out of the rules' fixtures.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainops", default=shutil.which("trainops") or "trainops")
    parser.add_argument("--json", type=Path, help="write every file's result here")
    args = parser.parse_args()
    trainops = str(Path(args.trainops).resolve()) if "/" in args.trainops else args.trainops
    rows = list(csv.DictReader((HERE / "SOURCES.tsv").open(), delimiter="\t"))
    results = []
    with tempfile.TemporaryDirectory() as outside:
        for row in rows:
            path = HERE / row["local_file"]
            run = subprocess.run(
                [trainops, "validate", "--no-cache", "--format", "json", str(path)],
                cwd=outside,
                capture_output=True,
                text=True,
                timeout=300,
                env={"PATH": "/usr/bin:/bin", "TRAINOPS_CACHE_DIR": f"{outside}/cache"},
            )
            try:
                findings = json.loads(run.stdout)["findings"] if run.stdout.strip() else []
            except ValueError:
                findings = []
            results.append(
                {
                    "file": row["local_file"],
                    "rc": run.returncode,
                    "crash": "Traceback" in run.stderr,
                    "errors": [
                        (f["resource"], f["path"], f["rule"])
                        for f in findings
                        if f["severity"] == "error"
                    ],
                }
            )
    judged = {}
    errors_tsv, verdicts_tsv = HERE / "errors-after.tsv", HERE / "verdicts-after.tsv"
    verdicts = {r["id"]: r["verdict"] for r in csv.DictReader(verdicts_tsv.open(), delimiter="\t")}
    for r in csv.DictReader(errors_tsv.open(), delimiter="\t"):
        judged[(r["file"], r["resource"], r["path"], r["rule"])] = verdicts.get(r["id"])
    counts = {"true": 0, "false": 0, None: 0}
    for result in results:
        for resource, path, rule in result["errors"]:
            counts[judged.get((result["file"], resource, path, rule))] += 1
    files = len(results)
    print(
        f"files {files}, refused (exit 2) {sum(r['rc'] == 2 for r in results)}, "
        f"crashes {sum(r['crash'] for r in results)}, errors "
        f"{sum(len(r['errors']) for r in results)}: judged true {counts['true']}, "
        f"false {counts['false']} ({counts['false'] / files:.3f} per file), "
        f"not judged yet {counts[None]}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
