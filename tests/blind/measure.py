"""Measure how much of the blind set `trainops validate` catches.

The blind set (one directory per case under tests/blind/, each with bad.yaml,
good.yaml and case.yaml) was written without reading the policy pack, so its
detection rate says how well the rules generalise. This runner validates every
bad and good manifest with `trainops validate --format json` and reports, per
case, whether the bad file has an error or warning finding that the good file
lacks (detected), whether one of those is an error (as error), and whether the
good file has any error (a false error). Findings are matched by rule,
severity, resource, JSON path and message. A "no schema for <kind>" error is not a
detection (it says nothing about the misconfiguration), but it does count as an
error on a good file.

It reports; it does not assert: tests/blind/test_blind_set.py only checks that
the set is well formed.

    .venv/bin/python tests/blind/measure.py [--set DIR] [--trainops PATH] [--json] [-j N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPORTED = ("error", "warning")


@dataclass
class Run:
    """One `trainops validate` of one file."""

    exit_code: int
    findings: list[dict] = field(default_factory=list)
    failure: str = ""  # set when the output was not a JSON report

    def keys(self) -> set[tuple]:
        return {finding_key(f) for f in self.findings}

    def errors(self) -> list[dict]:
        return [f for f in self.findings if f.get("severity") == "error"]


@dataclass
class Outcome:
    """What the validator made of one case."""

    case: str
    family: str
    expected: str
    bad: Run
    good: Run

    def caught(self) -> list[dict]:
        good_keys = self.good.keys()
        return [
            f
            for f in self.bad.findings
            if f.get("severity") in REPORTED
            and finding_key(f) not in good_keys
            and not is_missing_schema(f)
        ]

    @property
    def detected(self) -> bool:
        return bool(self.caught())

    @property
    def as_error(self) -> bool:
        return any(f["severity"] == "error" for f in self.caught())

    @property
    def good_has_error(self) -> bool:
        return bool(self.good.errors()) or bool(self.good.failure)


def finding_key(finding: dict) -> tuple:
    # The message is part of the key: one rule may report two problems at one place (the
    # good file's remaining defect and the case's), and the case's shows only in its text.
    return (
        finding.get("rule"),
        finding.get("severity"),
        finding.get("resource"),
        finding.get("path"),
        finding.get("message"),
    )


def is_missing_schema(finding: dict) -> bool:
    """A kind trainops has no schema for (rule schema-missing; before it had an id of its
    own, rule schema): what it says names the apiVersion, so it differs between a bad and
    a good file that differ there, yet it detects nothing."""
    return finding.get("rule") in ("schema", "schema-missing") and finding.get(
        "message", ""
    ).startswith("no schema for")


def case_dirs(root: Path = HERE) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "case.yaml").is_file())


def default_trainops() -> str:
    found = shutil.which("trainops")
    if found:
        return found
    sibling = Path(sys.executable).with_name("trainops")
    return str(sibling)


def validate(trainops: str, path: Path) -> Run:
    proc = subprocess.run(
        [trainops, "validate", "--format", "json", "--no-cache", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        message = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Run(proc.returncode, failure=message)
    return Run(proc.returncode, report.get("findings", []))


def measure(trainops: str, jobs: int, root: Path = HERE) -> list[Outcome]:
    cases = case_dirs(root)
    meta = {c.name: yaml.safe_load((c / "case.yaml").read_text()) for c in cases}
    paths = [c / name for c in cases for name in ("bad.yaml", "good.yaml")]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = dict(zip(paths, pool.map(lambda p: validate(trainops, p), paths), strict=True))
    return [
        Outcome(
            case=c.name,
            family=meta[c.name]["family"],
            expected=meta[c.name]["expected"],
            bad=runs[c / "bad.yaml"],
            good=runs[c / "good.yaml"],
        )
        for c in cases
    ]


def summary(outcomes: list[Outcome]) -> dict:
    expect_error = [o for o in outcomes if o.expected == "error"]
    families = Counter(o.family for o in outcomes)
    detected_by_family = Counter(o.family for o in outcomes if o.detected)
    return {
        "cases": len(outcomes),
        "detected": sum(o.detected for o in outcomes),
        "expected_error": len(expect_error),
        "as_error_where_expected": sum(o.as_error for o in expect_error),
        "goods_with_errors": sum(o.good_has_error for o in outcomes),
        "families": {
            name: {"cases": n, "detected": detected_by_family[name]}
            for name, n in sorted(families.items())
        },
        "misses": [o.case for o in outcomes if not o.detected],
        "not_as_error": [o.case for o in expect_error if not o.as_error],
        "false_errors": [o.case for o in outcomes if o.good_has_error],
    }


def row(o: Outcome) -> str:
    caught = sorted({f["rule"] for f in o.caught()})
    verdict = "ERROR" if o.as_error else ("warn" if o.detected else "MISS")
    good = ""
    if o.good.failure:
        good = f"  good unreadable: {o.good.failure}"
    elif o.good.errors():
        good = "  good errors: " + ",".join(sorted({f["rule"] for f in o.good.errors()}))
    bad = f"  bad unreadable: {o.bad.failure}" if o.bad.failure else ""
    return f"{o.case:<48} {o.expected:<8} {verdict:<6} {','.join(caught)}{bad}{good}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainops", default=os.environ.get("TRAINOPS") or default_trainops())
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="validations in parallel")
    parser.add_argument(
        "--set", type=Path, default=HERE, help="the set's directory (default: tests/blind)"
    )
    args = parser.parse_args(argv)

    outcomes = measure(args.trainops, args.jobs, args.set.resolve())
    totals = summary(outcomes)
    if args.json:
        print(json.dumps(totals, indent=2))
        return 0
    print(f"{'case':<48} {'expected':<8} {'result':<6} rules on bad only")
    for outcome in outcomes:
        print(row(outcome))
    print()
    for name, fam in totals["families"].items():
        print(f"  {name:<28} {fam['detected']:>3}/{fam['cases']:<3} detected")
    print(
        f"detected {totals['detected']}/{totals['cases']}; "
        f"as error {totals['as_error_where_expected']}/{totals['expected_error']} "
        f"where the harm is an error; goods with errors {totals['goods_with_errors']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
