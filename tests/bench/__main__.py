"""`python -m tests.bench`: run every benchmark and print the ratios.

Results also go to bench-results/results.json. Speed is only ever compared
within one run on one machine; no absolute target is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.bench import (
    admission_bench,
    doctor_bench,
    parse_bench,
    scale_bench,
    startup_bench,
    trainer_bench,
    validate_bench,
)

RESULTS = Path("bench-results")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=int, default=4, help="copies of each cluster overlay")
    parser.add_argument(
        "--only",
        choices=[
            "validate",
            "schema",
            "policies",
            "admission",
            "scale",
            "parse",
            "startup",
            "trainer",
            "doctor",
        ],
        help="run one section",
    )
    parser.add_argument(
        "--clusters", type=int, default=50, help="scale: clusters in the synthetic repository"
    )
    parser.add_argument("--runs", type=int, default=40, help="scale: runs per cluster")
    options = parser.parse_args()
    results_file = RESULTS / "results.json"
    results: dict = json.loads(results_file.read_text()) if results_file.exists() else {}
    if options.only in (None, "validate", "schema", "policies"):
        results.update(validate_bench.run(options.copies, options.only))
    if options.only in (None, "scale"):
        results.update(scale_bench.run(options.clusters, options.runs))
    if options.only in (None, "admission"):
        results.update(admission_bench.run())
    if options.only in (None, "parse"):
        results.update(parse_bench.run())
    if options.only in (None, "startup"):
        results.update(startup_bench.run())
    if options.only in (None, "trainer"):
        results.update(trainer_bench.run())
    if options.only in (None, "doctor"):
        results.update(doctor_bench.run())
    RESULTS.mkdir(exist_ok=True)
    results_file.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nresults: {RESULTS / 'results.json'}")


main()
